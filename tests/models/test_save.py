"""Saved checkpoints hold what they say (float weights, no GGUF quantization_config); a failed save leaves nothing."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch

from toolkit.api import RunConfig, list_runs, prune_model
from toolkit.errors import ToolkitError
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


def _disk_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """The safetensors write of save_pretrained writes a little, then the disk is full."""
    import transformers.modeling_utils

    def full(state: object, filename: str, metadata: object = None) -> None:
        Path(filename).write_bytes(b"\0" * 64)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full)


def test_a_failed_save_leaves_no_partial_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load_model("tiny-llama")
    _disk_full(monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(loaded.model, loaded.codec, tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


def test_a_failing_finish_step_leaves_no_partial_folder(tmp_path: Path) -> None:
    loaded = load_model("tiny-llama")

    def finish(partial: Path) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(partial / "prunelab_structure.json"))

    with pytest.raises(OSError):
        save_checkpoint(loaded.model, loaded.codec, tmp_path / "ckpt", finish=finish)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_quantized_save_cleans_up_and_says_what_the_run_kept(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("compressed_tensors")
    _disk_full(monkeypatch)
    config = RunConfig(model="tiny-llama", method="rtn", sparsity=None, quant="int4:g32", out_dir=str(tmp_path),
                       save_model=True, nsamples=2, seqlen=32, eval_seqlen=32, eval_windows=2)
    with pytest.raises(ToolkitError) as caught:
        prune_model(config)
    (record,) = list_runs(tmp_path)
    message = str(caught.value)
    assert "\n" not in message and "No space left on device" in message
    assert "the partial one was removed" in message and "--save-model" in message
    assert f"the masks and quantization states are saved in {record.path}" in message
    assert record.status == "failed" and record.error == message
    assert not [p.name for p in record.path.iterdir() if "partial" in p.name or p.name == "model"]
    assert len(record.quant_names()) == 14
