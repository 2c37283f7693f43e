"""Saving and loading shrunk models: per-layer format through load_model, uniform through plain transformers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers.block_models import logits, prune, tiny
from toolkit.errors import ToolkitError
from toolkit.events import RunWarning
from toolkit.models.load import load_model
from toolkit.models.shrunk import load_shrunk, save_shrunk
from toolkit.models.sources import MARKER, is_shrunk
from toolkit.models.tokenizers import ByteCodec


@pytest.mark.parametrize("family, options", [("llama", {}), ("qwen2", {"gqa": "query"}), ("opt", {}),
                                             ("llama", {"method": "flap"})])
def test_per_layer_save_load_gives_the_same_logits(tmp_path: Path, family: str, options: dict) -> None:
    model = tiny(family)
    result = prune(model, ratio="structured:40%", **options)[0]
    assert len({(r["num_heads"], r["intermediate_size"]) for r in result.structure["layers"]}) > 1
    folder = save_shrunk(model, ByteCodec(), tmp_path / "shrunk")
    assert is_shrunk(folder)
    loaded = load_model(str(folder))
    torch.testing.assert_close(logits(loaded.model), logits(model), atol=1e-6, rtol=0)
    assert isinstance(loaded.codec, ByteCodec)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_uniform_writes_a_standard_config(tmp_path: Path, family: str) -> None:
    from transformers import AutoModelForCausalLM

    model = tiny(family)
    result = prune(model, ratio="structured:40%", uniform=True)[0]
    counts = {(r["num_heads"], r["num_kv_heads"], r["intermediate_size"]) for r in result.structure["layers"]}
    assert len(counts) == 1 and next(iter(counts))[0] < 9
    folder = save_shrunk(model, ByteCodec(), tmp_path / "uniform")
    assert not is_shrunk(folder)
    config = json.loads((folder / "config.json").read_text())
    heads, kv_heads, intermediate = next(iter(counts))
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"],
            config["intermediate_size"]) == (heads, kv_heads, 8, intermediate)
    plain = AutoModelForCausalLM.from_pretrained(folder).eval()
    torch.testing.assert_close(logits(plain), logits(model), atol=1e-6, rtol=0)


def test_uniform_counts_a_config_refuses_fall_back_to_the_per_layer_format(tmp_path: Path) -> None:
    model = tiny("llama", heads=8, kv_heads=8)  # hidden 72: LlamaConfig refuses 7 heads (72 % 7 ≠ 0)
    _, events, _, _ = prune(model, ratio="structured:10%", unit="heads", uniform=True, min_heads=7)
    assert {m.out_features for n, m in model.named_modules() if n.endswith("q_proj")} == {56}
    assert model.config.num_attention_heads == 8
    assert any(isinstance(e, RunWarning) and "refuses 7 heads" in e.message for e in events)
    folder = save_shrunk(model, ByteCodec(), tmp_path / "refused")
    assert is_shrunk(folder)
    torch.testing.assert_close(logits(load_model(str(folder)).model), logits(model), atol=1e-6, rtol=0)


def test_unknown_marker_format_is_refused(tmp_path: Path) -> None:
    model = tiny("llama")
    prune(model)
    folder = save_shrunk(model, ByteCodec(), tmp_path / "m")
    (folder / MARKER).write_text(json.dumps({"format": "other/9"}))
    with pytest.raises(ToolkitError, match="unknown format"):
        load_shrunk(folder)


def _per_layer_folder(tmp_path: Path) -> tuple[torch.nn.Module, Path]:
    model = tiny("llama")
    prune(model, ratio="structured:40%")
    return model, save_shrunk(model, ByteCodec(), tmp_path / "per-layer")


def test_plain_transformers_refuses_a_per_layer_folder_naming_the_loader(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    model, folder = _per_layer_folder(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    assert "toolkit.load_model" in config["model_type"]
    for loader in (AutoModelForCausalLM, LlamaForCausalLM):  # the Auto class, and the concrete one
        for options in ({}, {"ignore_mismatched_sizes": True}):  # transformers' own hint for a size mismatch
            with pytest.raises(Exception, match=r"toolkit\.load_model"):
                loader.from_pretrained(folder, **options)
    reloaded = load_model(str(folder))
    torch.testing.assert_close(logits(reloaded.model), logits(model), atol=1e-6, rtol=0)
    assert reloaded.model.config.model_type == "llama" and reloaded.model.config.tie_word_embeddings is False
    assert "per-layer shapes" in reloaded.label


def test_a_per_layer_folder_of_the_first_format_still_loads(tmp_path: Path) -> None:
    model, folder = _per_layer_folder(tmp_path)
    record = json.loads((folder / MARKER).read_text())  # written before config.json named the loader
    config = json.loads((folder / "config.json").read_text()) | record.pop("config")
    (folder / "config.json").write_text(json.dumps(config))
    (folder / MARKER).write_text(json.dumps(record | {"format": "prunelab-shrunk/1"}))
    assert config["model_type"] == "llama"
    torch.testing.assert_close(logits(load_model(str(folder)).model), logits(model), atol=1e-6, rtol=0)


def test_a_model_loaded_per_layer_and_saved_again_stays_per_layer(tmp_path: Path) -> None:
    model, folder = _per_layer_folder(tmp_path)
    again = save_shrunk(load_model(str(folder)).model, ByteCodec(), tmp_path / "again")
    assert is_shrunk(again)
    torch.testing.assert_close(logits(load_model(str(again)).model), logits(model), atol=1e-6, rtol=0)
