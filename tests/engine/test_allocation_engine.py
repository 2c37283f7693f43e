"""The plan phase and DSnoT in the engine: per-layer ratios applied and recorded, totals met, masks refined."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.engine.test_prune import _windows
from toolkit.engine.allocation import layer_sizes
from toolkit.engine.prune import prune_layers
from toolkit.engine.state import EngineConfig
from toolkit.errors import ToolkitError
from toolkit.events import AllocationPlanned, MaskRefined, SublayerPruned
from toolkit.methods import get_method
from toolkit.models.layers import decoder_layers, get_weight, layer_linears
from toolkit.models.load import load_model
from toolkit.spec.allocation import parse_allocation, weighted_mean
from toolkit.spec.refine import parse_refine
from toolkit.spec.targets import NM, Unstructured


def _prune(method: str, target: object, allocation: str = "uniform", refine: str | None = None,
           model_name: str = "tiny-llama") -> tuple[torch.nn.Module, object, list]:
    model = load_model(model_name).model
    spec = get_method(method)
    events: list = []
    cfg = EngineConfig(batch_size=2, allocation=parse_allocation(allocation), refine=parse_refine(refine))
    result = prune_layers(model, _windows(), spec, target, spec.make_config(), cfg=cfg, emit=events.append)
    return model, result, events


def _layer_sparsity(layer: torch.nn.Module) -> float:
    weights = [get_weight(m) for m in layer_linears(layer).values()]
    return sum(int((w == 0).sum()) for w in weights) / sum(w.numel() for w in weights)


@pytest.mark.parametrize("method", ["magnitude", "wanda", "sparsegpt"])
def test_owl_plan_meets_the_total_and_each_layer_gets_its_ratio(method: str) -> None:
    model, result, events = _prune(method, Unstructured(0.7), "owl:5,0.1")
    layers = decoder_layers(model)
    plan = result.allocation
    ratios = plan["ratios"]
    assert len(ratios) == len(layers) and len(plan["outlier_ratios"]) == len(layers)
    assert weighted_mean(ratios, layer_sizes(layers)) == pytest.approx(0.7, abs=1e-12)
    assert max(ratios) > min(ratios)  # the tiny model's layers differ in outliers
    narrowest = min(get_weight(m).shape[1] for m in layer_linears(layers[0]).values())
    for layer, ratio in zip(layers, ratios, strict=True):  # rounded down per row (or matrix), as uniform runs are
        assert ratio - 1 / narrowest < _layer_sparsity(layer) <= ratio + 1e-9
    assert 0.7 - 1 / narrowest < result.achieved_sparsity <= 0.7 + 1e-9
    (planned,) = [e for e in events if isinstance(e, AllocationPlanned)]
    assert planned.ratios == ratios and planned.total == pytest.approx(0.7)
    assert "plan" in result.phases[0]


def test_file_allocation_is_applied_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "ratios.json"
    path.write_text(json.dumps({"layers": [0.5, 0.7]}))
    model, result, _ = _prune("wanda", Unstructured(0.6), str(path))
    got = [_layer_sparsity(layer) for layer in decoder_layers(model)]
    assert got == pytest.approx([0.5, 0.7], abs=1 / 64)  # 64 inputs per row: rounded down by < 1/64
    assert result.allocation["kind"] == "file"
    path.write_text(json.dumps({"layers": [0.5, 0.5]}))
    with pytest.raises(ToolkitError, match=r"differ by -0\.1000"):
        _prune("wanda", Unstructured(0.6), str(path))
    path.write_text(json.dumps({"layers": [0.6, 0.6, 0.6]}))
    with pytest.raises(ToolkitError, match="has 3 layer ratios; the model has 2"):
        _prune("wanda", Unstructured(0.6), str(path))


def test_allocation_refuses_nm_and_quantize_only() -> None:
    with pytest.raises(ToolkitError, match="2:4 fixes the sparsity"):
        _prune("wanda", NM(2, 4), "owl")


@pytest.mark.parametrize(("method", "target"), [("wanda", Unstructured(0.6)), ("sparsegpt", Unstructured(0.6)),
                                                ("wanda", NM(2, 4))])
def test_dsnot_keeps_the_sparsity_and_reports_both_objectives(method: str, target: object) -> None:
    _, plain, _ = _prune(method, target)
    _, refined, events = _prune(method, target, refine="dsnot:20,0,all")
    assert refined.achieved_sparsity == pytest.approx(plain.achieved_sparsity, abs=1e-12)
    records = [e for e in events if isinstance(e, MaskRefined)]
    pruned = [e for e in events if isinstance(e, SublayerPruned)]
    assert len(records) == len(pruned) and sum(e.swaps for e in records) > 0  # all: every linear refined
    for record in records:
        assert record.expected_error_after <= record.expected_error_before + 1e-6
    assert sum(r.rel_error_after for r in records) != pytest.approx(sum(r.rel_error_before for r in records))
    assert "refine" in refined.phases[1]


def test_dsnot_refines_the_attention_only_by_default() -> None:
    _, _, events = _prune("wanda", Unstructured(0.6), refine="dsnot:5")
    names = {e.name for e in events if isinstance(e, MaskRefined)}
    assert names and all(name.startswith("self_attn.") for name in names)
