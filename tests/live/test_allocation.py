"""The allocation view: AllocationPlanned / LayerStarted / MaskRefined folded into per-layer sparsity (no torch)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tests.helpers.synthetic_runs import run_events
from toolkit.events import AllocationPlanned, LayerStarted, MaskRefined, RunStarted, SublayerPruned
from toolkit.live.allocation import AllocationView, allocation_from_result, weights_per_layer
from toolkit.live.view import RunView, fold

OWL = AllocationPlanned(allocation="owl:5,0.08", ratios=[0.78, 0.62], outlier_ratios=[0.0081, 0.0095], total=0.7,
                        seconds=0.3)


def refined(layer: int, name: str, swaps: int = 10) -> MaskRefined:
    return MaskRefined(layer=layer, name=name, swaps=swaps, cycles=3, expected_error_before=0.5,
                       expected_error_after=0.2, rel_error_before=0.4, rel_error_after=0.35)


def started(sparsity: str = "70%", compression: dict | None = None, layers: int = 2) -> RunStarted:
    first = run_events(layers=layers)[0]
    assert isinstance(first, RunStarted)
    kind = "nm" if ":" in sparsity else "unstructured"
    fraction = 0.5 if kind == "nm" else float(sparsity.rstrip("%")) / 100
    data = compression if compression is not None else {"label": sparsity, "kind": kind,
                                                         "sparsity": {"kind": kind, "fraction": fraction}}
    return dataclasses.replace(first, sparsity=sparsity, compression=data)


def test_owl_plan_and_refinement_fold_into_the_run_view() -> None:
    view = RunView()
    view.apply(started())
    assert view.allocation.applies and not view.allocation.planned and view.allocation.target == 0.7
    before = dict(view.revision)
    view.apply(OWL)
    assert view.revision["allocation"] == before["allocation"] + 1  # the bar chart redraws
    assert view.revision.get("heatmap") == before.get("heatmap")  # and nothing else does
    assert view.allocation.layer_ratios() == [0.78, 0.62] and view.allocation.outlier_ratios == [0.0081, 0.0095]
    assert view.allocation.label == "owl:5,0.08" and not view.allocation.uniform
    view.apply(LayerStarted(layer=0, num_layers=2, groups=[]))  # planned already: still OWL's ratios
    assert view.allocation.layer_ratios() == [0.78, 0.62]
    refine = view.revision.get("refine", 0)
    view.apply(refined(0, "self_attn.q_proj"))
    view.apply(refined(0, "self_attn.k_proj"))
    assert [e.name for e in view.allocation.refined] == ["self_attn.q_proj", "self_attn.k_proj"]
    assert view.revision["refine"] == refine + 2


def test_a_uniform_run_is_planned_at_its_first_layer() -> None:
    view = RunView()
    events = run_events(layers=3, method="wanda")  # no AllocationPlanned: a run from before allocation, or uniform
    view.apply(events[0])
    assert view.allocation.layer_ratios() == []  # not known before pruning starts
    first_layer = next(i for i, e in enumerate(events) if isinstance(e, LayerStarted))
    for event in events[1:first_layer + 1]:
        view.apply(event)
    assert view.allocation.planned and view.allocation.label == "uniform"
    assert view.allocation.layer_ratios() == [0.5, 0.5, 0.5]  # run_events: schema-1 style, label "50%"
    revision = view.revision["allocation"]
    for event in events[first_layer + 1:]:
        view.apply(event)
    assert view.revision["allocation"] == revision  # later layers change nothing


@pytest.mark.parametrize(("sparsity", "compression", "applies"), [
    ("2:4", None, True),
    ("structured:30%", {"label": "structured:30%", "kind": "structured",
                        "sparsity": {"kind": "structured", "fraction": 0.3}}, False),
    ("int4:g128", {"label": "int4:g128", "kind": "quant", "sparsity": None}, False),
])
def test_only_unstructured_and_nm_runs_have_a_per_layer_sparsity(sparsity: str, compression: dict | None,
                                                                applies: bool) -> None:
    view = AllocationView()
    view.apply(started(sparsity, compression))
    assert view.applies is applies and view.compression == sparsity


def test_a_new_run_starts_a_fresh_allocation() -> None:
    view = fold([started(), OWL, refined(0, "q")])
    view.apply(started("50%"))
    assert not view.allocation.planned and not view.allocation.refined and view.allocation.target == 0.5


def test_allocation_from_result_owl_and_uniform() -> None:
    layers = [{"layer": 0, "name": "q", "shape": [4, 8], "params_before": 32},
              {"layer": 0, "name": "down", "shape": [8, 4], "params_before": 32},
              {"layer": 1, "name": "q", "shape": [4, 8]}]  # no params_before: counted from the shape
    compression = {"label": "70%", "kind": "unstructured", "sparsity": {"kind": "unstructured", "fraction": 0.7}}
    owl = allocation_from_result({"compression": compression, "layers": layers, "allocation": {
        "kind": "owl", "label": "owl:5,0.08", "ratios": [0.75, 0.6], "outlier_ratios": [0.01, 0.02],
        "layer_weights": [64, 32], "total": 0.7}})
    assert owl.planned and owl.layer_ratios() == [0.75, 0.6] and owl.layer_weights == [64, 32]
    assert owl.total == 0.7 and owl.outlier_ratios == [0.01, 0.02]
    uniform = allocation_from_result({"compression": compression, "layers": layers,
                                      "allocation": {"kind": "uniform", "label": "uniform"}})
    assert uniform.layer_ratios() == [0.7, 0.7] and uniform.layer_weights == [64, 32] and uniform.label == "uniform"
    old = allocation_from_result({"sparsity": "60%", "layers": layers})  # schema 1: no compression, no allocation
    assert old.applies and old.layer_ratios() == [0.6, 0.6] and math.isclose(old.total, 0.6)


def test_weights_per_layer_skips_hand_edited_records() -> None:
    assert weights_per_layer([{"layer": 1, "shape": [2, 3]}, "junk", {"layer": "x"}]) == [0, 6]
    assert weights_per_layer([]) == []


def test_sublayer_events_do_not_touch_the_allocation() -> None:
    view = fold([started(), OWL])
    before = view.revision["allocation"]
    view.apply(SublayerPruned(layer=0, name="q", shape=[2, 2], sparsity=0.78, rel_error=0.1,
                              rel_error_dense=math.nan, damping=math.nan, seconds=0.0))
    assert view.revision["allocation"] == before
