"""The sequential engine on tiny random Llama-, OPT-, GPT-2-, Qwen2- and Gemma-3-like models."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.helpers.failing import exploding
from toolkit.data.text import CalibSpec, calibration_windows
from toolkit.engine.prune import prune_layers
from toolkit.engine.state import EngineConfig
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import LayerDone, LayerStarted, SublayerPruned
from toolkit.methods import get_method
from toolkit.methods.base import MethodSpec, Stat
from toolkit.models.layers import decoder_layers, get_weight, layer_linears
from toolkit.models.load import load_model
from toolkit.models.sources import TINY_FAMILIES
from toolkit.spec.targets import NM, Unstructured


def _windows(num: int = 4, seq: int = 32) -> torch.Tensor:
    tokens = torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(0))
    return calibration_windows(tokens, CalibSpec("x", num, seq, 0))


def _run(model: torch.nn.Module, method: str = "wanda", target: object = Unstructured(0.5), **engine: object):
    spec = get_method(method)
    events: list = []
    result = prune_layers(model, _windows(), spec, target, spec.make_config(), cfg=EngineConfig(batch_size=2, **engine),
                          emit=events.append)
    return result, events


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_every_linear_pruned_and_event_sequence(family: str) -> None:
    model = load_model(f"tiny-{family}").model
    layers = decoder_layers(model)
    result, events = _run(model, "sparsegpt", NM(2, 4))
    kinds = [type(e) for e in events]
    linears_per_layer = len(layer_linears(layers[0]))
    expected = ([LayerStarted] + [SublayerPruned] * linears_per_layer + [LayerDone]) * len(layers)
    assert kinds == expected
    for layer in layers:
        for module in layer_linears(layer).values():
            W = get_weight(module)
            assert float((W == 0).float().mean()) == pytest.approx(0.5)
    assert result.achieved_sparsity == pytest.approx(0.5)
    # embeddings and lm_head are never pruned
    assert float((model.get_input_embeddings().weight == 0).float().mean()) < 0.01


def test_groups_follow_shared_inputs_in_call_order() -> None:
    model = load_model("tiny-llama").model
    _, events = _run(model)
    groups = next(e for e in events if isinstance(e, LayerStarted)).groups
    assert groups == [["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"], ["self_attn.o_proj"],
                      ["mlp.gate_proj", "mlp.up_proj"], ["mlp.down_proj"]]


@pytest.mark.parametrize("sequential", ["layer", "group"])
def test_rel_error_matches_direct_computation(sequential: str) -> None:
    model = load_model("tiny-llama").model
    dense = copy.deepcopy(model)
    captured: list[torch.Tensor] = []
    q_proj = decoder_layers(dense)[0].self_attn.q_proj
    handle = q_proj.register_forward_pre_hook(lambda m, a: captured.append(a[0].reshape(-1, a[0].shape[-1])))
    with torch.no_grad():
        dense(input_ids=_windows(), use_cache=False)
    handle.remove()
    X = torch.cat(captured)
    _, events = _run(model, "sparsegpt", Unstructured(0.5), sequential=sequential)
    event = next(e for e in events if isinstance(e, SublayerPruned) and e.layer == 0 and e.name.endswith("q_proj"))
    W, W_new = q_proj.weight.detach(), decoder_layers(model)[0].self_attn.q_proj.weight.detach()
    direct = torch.linalg.norm(X @ (W_new - W).T) / torch.linalg.norm(X @ W.T)
    assert event.rel_error == pytest.approx(float(direct), rel=1e-3)


def test_propagate_dense_keeps_dense_inputs_and_differs_from_pruned() -> None:
    errors = {}
    for propagate in ("pruned", "dense"):
        model = load_model("tiny-llama").model
        _, events = _run(model, "magnitude", Unstructured(0.7), propagate=propagate, calibrate="always")
        errors[propagate] = [e.output_rel_error for e in events if isinstance(e, LayerDone)]
    assert errors["pruned"][0] == pytest.approx(errors["dense"][0])  # layer 0 sees the same inputs
    assert errors["pruned"][1] != pytest.approx(errors["dense"][1])


def test_model_restored_after_mid_run_error() -> None:
    model = load_model("tiny-llama").model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    events: list = []
    with pytest.raises(ToolkitError, match="boom"):
        prune_layers(model, _windows(), exploding(1), Unstructured(0.5), get_method("magnitude").make_config(),
                     cfg=EngineConfig(batch_size=2), emit=events.append)
    assert any(isinstance(e, LayerDone) for e in events), "layer 0 finished before the failure"
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_cancel_stops_and_restores() -> None:
    model = load_model("tiny-opt").model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    seen: list = []
    spec = get_method("wanda")
    with pytest.raises(RunCancelled):
        prune_layers(model, _windows(), spec, Unstructured(0.5), spec.make_config(), cfg=EngineConfig(batch_size=2),
                     emit=seen.append, cancelled=lambda: len(seen) >= 3)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_cross_statistics_for_methods_that_ask() -> None:
    """A method declaring CROSS gets cross/dense_gram; in group mode they differ from the Gram
    once earlier groups of the layer are pruned (intra-layer error correction)."""
    base = get_method("magnitude")
    received: dict[str, object] = {}

    def fn(W, stats, target, cfg, ctx):
        received[f"{ctx.layer}.{ctx.name}"] = stats
        return base.fn(W, stats, target, cfg, ctx)

    spec = MethodSpec("probe", fn, base.config, frozenset({Stat.GRAM, Stat.CROSS}), sequential="group")
    model = load_model("tiny-llama").model
    events: list = []
    prune_layers(model, _windows(), spec, Unstructured(0.5), base.make_config(), cfg=EngineConfig(batch_size=2),
                 emit=events.append)
    first, later = received["0.self_attn.q_proj"], received["0.mlp.down_proj"]
    assert torch.allclose(first.cross, first.gram) and torch.allclose(first.dense_gram, first.gram)
    assert not torch.allclose(later.cross, later.gram)
    pruned = [e for e in events if isinstance(e, SublayerPruned)]
    assert all(e.rel_error_dense == e.rel_error_dense for e in pruned)  # not NaN with cross stats
