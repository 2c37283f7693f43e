"""The per-layer sparsity bar chart and DSnoT's refinement panel: pure builders, registered Run-view figures."""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
import pytest

from toolkit.events import AllocationPlanned, LayerStarted, MaskRefined, RunStarted
from toolkit.figures import allocation as viz
from toolkit.figures.registry import ROWS, RUN_FIGURES, figure, revision
from toolkit.live.allocation import AllocationView
from toolkit.live.view import RunView, fold


def valid(fig: go.Figure) -> Any:
    """The builders skip plotly's validation (toolkit/figures/run.py): validate here."""
    return go.Figure(fig.to_dict())


def test_owl_bars_target_line_and_outlier_axis() -> None:
    fig = valid(viz.allocation_figure([0.75, 0.6, 0.75], target=0.7, outlier_ratios=[0.01, 0.03, 0.01],
                                      label="owl:5,0.08", layer_weights=[100, 100, 200]))
    bars, lod = fig.data
    assert bars.type == "bar" and list(bars.y) == [0.75, 0.6, 0.75] and list(bars.x) == [0, 1, 2]
    assert lod.yaxis == "y2" and list(lod.y) == [0.01, 0.03, 0.01]
    assert fig.layout.yaxis2.overlaying == "y" and fig.layout.yaxis2.side == "right"
    (line,) = fig.layout.shapes
    assert line.y0 == line.y1 == 0.7 and line.line.dash == "dash"
    # the total is weighted by the layers' weights: (75 + 60 + 150) / 400 = 0.7125
    assert fig.layout.title.text == "per-layer sparsity · owl:5,0.08 · total 71.2%"
    assert "outlier ratio LOD 3.000%" in bars.customdata[1] and "-10.0 points" in bars.customdata[1]


def test_a_uniform_run_is_a_flat_row_at_the_target() -> None:
    view = AllocationView(kind="unstructured", target=0.5, compression="50%", num_layers=4)
    view.apply(LayerStarted(layer=0, num_layers=4, groups=[]))
    fig = valid(viz.allocation_view_figure(view))
    (bars,) = fig.data  # no outlier axis
    assert list(bars.y) == [0.5] * 4 and fig.layout.title.text == "per-layer sparsity · uniform 50.0%"
    assert "yaxis2" not in fig.to_dict()["layout"]


def test_nm_runs_draw_their_fixed_fraction_and_ratio_files_their_name() -> None:
    nm = AllocationView(kind="nm", target=0.5, compression="2:4", num_layers=2, planned=True)
    assert valid(viz.allocation_view_figure(nm)).layout.title.text.startswith("per-layer sparsity · 2:4 in every layer")
    file = AllocationView(kind="unstructured", target=0.6, compression="60%", num_layers=2, planned=True,
                          label="/tmp/runs/allocation-ab12.json", ratios=[0.5, 0.7])
    assert "· file allocation-ab12.json ·" in valid(viz.allocation_view_figure(file)).layout.title.text


@pytest.mark.parametrize(("view", "text"), [
    (AllocationView(), "when a run starts"),
    (AllocationView(kind="structured", target=0.3, compression="structured:30%", num_layers=2),
     "this run is structured:30%"),
    (AllocationView(kind="", compression="int4:g128", num_layers=2), "this run is int4:g128"),
    (AllocationView(kind="unstructured", target=0.7, compression="70%", num_layers=2), "before layer 0"),
])
def test_notes_until_there_is_something_to_draw(view: AllocationView, text: str) -> None:
    fig = valid(viz.allocation_view_figure(view))
    assert not fig.data and text in fig.layout.annotations[0].text


def refined(layer: int, name: str, before: float, after: float, swaps: int) -> MaskRefined:
    return MaskRefined(layer=layer, name=name, swaps=swaps, cycles=4, expected_error_before=0.5,
                       expected_error_after=0.1, rel_error_before=before, rel_error_after=after)


def test_refine_panel_means_per_layer_and_swaps() -> None:
    events = [refined(0, "self_attn.q_proj", 0.4, 0.3, 10), refined(0, "self_attn.k_proj", 0.6, 0.5, 20),
              refined(1, "self_attn.q_proj", 0.2, 0.2, 0)]
    fig = valid(viz.refine_figure(events))
    lines = {trace.name: trace for trace in fig.data}
    assert list(lines["error, method's mask"].y) == pytest.approx([0.5, 0.2])
    assert list(lines["error, refined"].y) == pytest.approx([0.4, 0.2])
    assert list(lines["DSnoT objective after"].y) == pytest.approx([0.1, 0.1])
    assert lines["error, refined"].line.dash == "solid" and lines["DSnoT objective after"].line.dash == "dot"
    assert "q_proj: 0.4000 → 0.3000 (10 swaps)" in lines["error, refined"].customdata[0]
    assert "30 swaps in 3 linears" in fig.layout.title.text and "0.4000 → 0.3333" in fig.layout.title.text
    assert not valid(viz.refine_figure([])).data  # a run without DSnoT: a note


def test_registered_in_the_run_view_and_redrawn_only_by_their_sections() -> None:
    assert ROWS["allocation"] == ("allocation", "refine")
    assert RUN_FIGURES["refine"].hidden_until_drawn and RUN_FIGURES["allocation"].export
    start = RunStarted(run_id="r", model="tiny-llama", method="wanda", sparsity="70%", options={}, protocol={},
                       num_layers=2, linears=["q"], device="cpu",
                       compression={"label": "70%", "sparsity": {"kind": "unstructured", "fraction": 0.7}})
    view = fold([start])
    drawn = {name: revision(view, name) for name in ("allocation", "refine", "heatmap")}
    view.apply(AllocationPlanned(allocation="owl:5,0.08", ratios=[0.8, 0.6], outlier_ratios=[0.01, 0.02],
                                 total=0.7, seconds=0.1))
    assert revision(view, "allocation") > drawn["allocation"]
    assert revision(view, "refine") == drawn["refine"] and revision(view, "heatmap") == drawn["heatmap"]
    assert list(figure(view, "allocation").data[0].y) == [0.8, 0.6]
    view.apply(refined(0, "q", 0.4, 0.3, 5))
    assert revision(view, "refine") > drawn["refine"] and figure(view, "refine").data


def test_idle_view_draws_notes() -> None:
    view = RunView()
    for name in ("allocation", "refine"):
        fig = figure(view, name)
        assert not fig.data and fig.layout.annotations


def test_non_finite_ratios_become_gaps() -> None:
    fig = valid(viz.allocation_figure([0.7, math.nan], target=0.7))
    assert list(fig.data[0].y) == [0.7, None]
