"""Folding an input scale s into what feeds a group keeps a decoder layer's function (llama and Gemma 3 layouts)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from toolkit.methods.awq import ScaledQuantState
from toolkit.methods.quant_grid import quantize
from toolkit.models.fold import GATE_UP, QKV, foldable, norm_gain, owner, plain, scaled_rows, shared_scale
from toolkit.models.layers import decoder_layers, layer_linears
from toolkit.models.load import load_model
from toolkit.spec.compression import QuantSpec

SPEC = QuantSpec(bits=4, group_size=32, symmetric=False)


def _layer(family: str) -> tuple[Any, Any, dict[str, Any]]:
    model: Any = load_model(f"tiny-{family}").model
    layer = decoder_layers(model)[0]
    return model, layer, layer_linears(layer)


def _logits(model: Any, ids: torch.Tensor) -> torch.Tensor:
    return model(ids).logits


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_folding_keeps_the_layer_function(family: str) -> None:
    torch.manual_seed(0)
    model, layer, linears = _layer(family)
    groups = [list(QKV), ["self_attn.o_proj"], list(GATE_UP), ["mlp.down_proj"]]
    scaled: dict[str, ScaledQuantState] = {}
    for group in groups:
        if not foldable(layer, linears, group):
            continue
        s = torch.rand(linears[group[0]].weight.shape[1]) * 2 + 0.25  # one s for the group
        for name in group:
            state = quantize(linears[name].weight.detach() * s, SPEC)
            scaled[name] = ScaledQuantState(state.codes, state.scales, state.zeros, SPEC, s)
            linears[name].weight.data = scaled[name].effective_weight()  # what AWQ's run computes with
    ids = torch.randint(0, model.config.vocab_size, (2, 12))
    with torch.no_grad():
        before = _logits(model, ids)
        changed = {}
        for group in groups:
            s = shared_scale(scaled, group)
            if s is None:
                continue
            feeder = owner(layer, linears, group)
            assert feeder is not None
            if feeder.kind == "norm":
                norm = getattr(layer, feeder.name)
                norm.weight.data = norm_gain(norm, s)
            else:
                changed[feeder.name] = scaled_rows(changed.get(feeder.name) or plain(scaled[feeder.name]), s)
            for name in group:
                changed.setdefault(name, plain(scaled[name]))
        for name, state in changed.items():
            linears[name].weight.data = state.effective_weight()
        after = _logits(model, ids)
    assert set(changed) >= set(QKV) | set(GATE_UP)  # the fold did happen
    assert torch.allclose(after, before, atol=1e-4, rtol=1e-4)


def test_o_proj_under_grouped_query_attention_is_not_foldable() -> None:
    _, layer, linears = _layer("llama")  # 4 query heads on 2 key/value heads
    assert not foldable(layer, linears, ["self_attn.o_proj"])
    down = owner(layer, linears, ["mlp.down_proj"])
    assert down is not None and down.name == "mlp.up_proj"
    qkv = owner(layer, linears, list(QKV))
    assert qkv is not None and qkv.name == "input_layernorm"


def test_gemma_gate_up_fold_into_the_pre_feedforward_norm() -> None:
    _, layer, linears = _layer("gemma3")
    gate_up = owner(layer, linears, list(GATE_UP))
    assert gate_up is not None and gate_up.name == "pre_feedforward_layernorm"  # not its post-attention one


def test_different_scales_in_one_group_are_refused() -> None:
    state = quantize(torch.randn(8, 32), SPEC)
    a = ScaledQuantState(state.codes, state.scales, state.zeros, SPEC, torch.ones(32))
    b = ScaledQuantState(state.codes, state.scales, state.zeros, SPEC, torch.full((32,), 2.0))
    with pytest.raises(ValueError, match="different input scales"):
        shared_scale({"a": a, "b": b}, ["a", "b"])
    assert shared_scale({"a": plain(a)}, ["a"]) is None
