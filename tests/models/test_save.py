"""Saved checkpoints describe what they hold: float weights, no GGUF quantization_config."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from toolkit.models.load import load_model
from toolkit.models.save import save_checkpoint


def test_saved_config_has_no_quantization_config(tmp_path: Path) -> None:
    from transformers.utils.quantization_config import GgufConfig

    loaded = load_model("tiny-llama")
    model = loaded.model
    gguf = GgufConfig(gguf_file="model.Q4_1.gguf")  # what from_pretrained(gguf_file=...) leaves on the config
    model.config.quantization_config = gguf
    model.save_pretrained(tmp_path / "plain")  # the problem: a plain save keeps it
    assert "quantization_config" in json.loads((tmp_path / "plain" / "config.json").read_text())

    folder = save_checkpoint(model, loaded.codec, tmp_path / "ckpt")
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    assert model.config.quantization_config is gguf  # the in-memory model is left as it was
    reloaded = load_model(str(folder)).model
    for ours, theirs in zip(model.state_dict().values(), reloaded.state_dict().values(), strict=True):
        assert torch.equal(ours, theirs)
