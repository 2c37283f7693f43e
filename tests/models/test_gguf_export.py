"""GGUF export of a model: read back by transformers' GGUF reader (independent of the writer), it is the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gguf import GGUFReader
from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor, load_gguf_checkpoint

from tests.helpers.gguf_source import write_source
from toolkit.errors import ToolkitError
from toolkit.methods.quant_grid import QuantState, dequantize, quantize
from toolkit.models.gguf_cache import layer_types
from toolkit.models.gguf_export import ExportTypes, export_gguf, head_rows, structure_overrides
from toolkit.models.layers import decoder_layers, layer_linears
from toolkit.models.load import load_model
from toolkit.spec.compression import QuantSpec


def _tiny(family: str) -> Any:  # a transformers model: its config and linears untyped on nn.Module
    return load_model(f"tiny-{family}").model


def _read_back(model: torch.nn.Module, path: Path) -> dict[str, torch.Tensor]:
    return load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]


def _quantize_all(model: Any, spec: QuantSpec) -> dict[str, QuantState]:
    """Quantize every decoder linear in place (its weight becomes the dequantized grid) and return the states."""
    states = {}
    for index, layer in enumerate(decoder_layers(model)):
        linears: dict[str, Any] = layer_linears(layer)
        for name, linear in linears.items():
            state = quantize(linear.weight.data.float(), spec)
            linear.weight.data = dequantize(state).to(linear.weight.dtype)
            states[f"model.layers.{index}.{name}.weight"] = state
    return states


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_float_export_reads_back_as_the_model(family: str, tmp_path: Path) -> None:
    model = _tiny(family)
    source = write_source(model.config, tmp_path / "source.gguf")
    report = export_gguf(model, {}, source, tmp_path / "out.gguf", ExportTypes(floats="f32"))
    tensors = _read_back(model, tmp_path / "out.gguf")
    state = model.state_dict()
    assert set(tensors) | {"lm_head.weight"} >= {k for k in state if not k.startswith("lm_head")}
    for name, value in tensors.items():  # norms (+1 for Gemma), the q/k permutation: undone by the reader
        assert torch.allclose(value.float(), state[name].float(), atol=1e-6), name
    assert report.exact == 0 and not report.requantized and set(report.types) == {"F32"}
    assert not (tmp_path / "out.gguf.partial").exists()


@pytest.mark.parametrize(("family", "spec", "qtype"), [
    ("llama", QuantSpec(bits=4, group_size=32, symmetric=False), "Q4_1"),
    ("llama", QuantSpec(bits=4, group_size=64, symmetric=True), "Q4_0"),
    ("gemma3", QuantSpec(bits=8, group_size=32, symmetric=True), "Q8_0"),
    ("gemma3", QuantSpec(bits=3, group_size=0, symmetric=False), "Q4_1")])
def test_quantized_export_is_code_for_code(family: str, spec: QuantSpec, qtype: str, tmp_path: Path) -> None:
    model = _tiny(family)
    states = _quantize_all(model, spec)
    source = write_source(model.config, tmp_path / "source.gguf")
    report = export_gguf(model, states, source, tmp_path / "out.gguf", ExportTypes(floats="f16"))
    assert report.exact == len(states) and not report.requantized
    assert report.types[qtype] == len(states)
    tensors = _read_back(model, tmp_path / "out.gguf")
    for name in states:
        weight = model.state_dict()[name].float()
        scale = weight.abs().max()
        assert torch.allclose(tensors[name].float(), weight, atol=float(scale) * 2e-3), name
    kinds = {t.name: t.tensor_type.name for t in GGUFReader(tmp_path / "out.gguf").tensors}
    assert kinds["blk.0.attn_q.weight"] == qtype and kinds["blk.0.attn_norm.weight"] == "F32"
    assert kinds["token_embd.weight"] == "F16"


def test_a_grid_no_block_holds_is_requantized_with_its_error(tmp_path: Path) -> None:
    model = _tiny("llama")
    states = _quantize_all(model, QuantSpec(bits=4, group_size=16, symmetric=False))  # 16-input groups
    source = write_source(model.config, tmp_path / "source.gguf")
    report = export_gguf(model, states, source, tmp_path / "out.gguf")
    assert report.exact == 0 and len(report.requantized) == len(states)
    assert all(0 < error < 0.5 for error in report.requantized.values())


def test_asking_a_type_that_does_not_hold_the_grid_requantizes(tmp_path: Path) -> None:
    model = _tiny("llama")
    states = _quantize_all(model, QuantSpec(bits=4, group_size=32, symmetric=False))
    source = write_source(model.config, tmp_path / "source.gguf")
    report = export_gguf(model, states, source, tmp_path / "out.gguf", ExportTypes(blocks="q4_0"))
    assert report.exact == 0 and report.types["Q4_0"] == len(states) and report.requantized


def test_removed_layers_rewrite_the_layer_count_and_gemma_pattern(tmp_path: Path) -> None:
    model = _tiny("gemma3")
    source = write_source(model.config, tmp_path / "source.gguf")
    layers = decoder_layers(model)
    del layers[1]  # a depth run: config and layers shrink together
    model.config.num_hidden_layers = 3
    model.config.layer_types = ["sliding_attention", "sliding_attention", "full_attention"]
    export_gguf(model, {}, source, tmp_path / "out.gguf")
    fields = GGUFReader(tmp_path / "out.gguf").fields
    assert int(fields["gemma3.block_count"].contents()) == 3
    assert int(fields["gemma3.attention.head_count_kv"].contents()) == model.config.num_key_value_heads
    assert list(fields["gemma3.attention.sliding_window_pattern"].contents()) == [True, True, False]
    assert fields["general.name"].contents() == "tiny test source"  # the source's metadata carried over
    assert layer_types(tmp_path / "out.gguf") == model.config.layer_types  # what PruneLab's GGUF loader reads back


def test_the_head_width_is_written_so_a_shrink_that_removed_heads_keeps_it() -> None:
    """llama.cpp takes n_embd / n_head as the head width unless key_length says otherwise: a uniform shrink to
    fewer heads (same hidden size) needs it written."""
    config = _tiny("llama").config
    config.num_attention_heads, config.num_key_value_heads = 2, 1  # as a shrink that removed heads leaves it
    keys = structure_overrides("llama", config)
    assert keys["llama.attention.head_count"][0] == 2
    assert keys["llama.attention.key_length"][0] == keys["llama.attention.value_length"][0] == config.head_dim
    assert config.hidden_size // 2 != config.head_dim  # what llama.cpp would have taken without it


def test_q_k_permutation_is_llama_cpp_s() -> None:
    """The exporter's row order is undone by transformers' reverse permutation (llama.cpp's converter's inverse)."""
    weight = np.arange(32 * 3, dtype=np.float32).reshape(32, 3)
    for heads in (4, 2):
        exported = weight[head_rows(32, heads)]
        back = LlamaTensorProcessor()._reverse_permute_weights(exported, heads, heads)
        assert np.array_equal(back, weight)


def test_a_failed_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _tiny("llama")
    source = write_source(model.config, tmp_path / "source.gguf")
    from gguf import GGUFWriter

    def full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(GGUFWriter, "write_tensors_to_file", full)
    with pytest.raises(ToolkitError, match="No space left on device"):
        export_gguf(model, {}, source, tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists() and not (tmp_path / "out.gguf.partial").exists()


def test_a_source_of_another_architecture_is_refused(tmp_path: Path) -> None:
    source = write_source(_tiny("gemma3").config, tmp_path / "source.gguf")
    with pytest.raises(ToolkitError, match="'gemma3' model"):
        export_gguf(_tiny("llama"), {}, source, tmp_path / "out.gguf")


def test_an_unsupported_family_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ToolkitError, match="llama, gemma3 and qwen2"):
        export_gguf(_tiny("opt"), {}, tmp_path / "none.gguf", tmp_path / "out.gguf")
