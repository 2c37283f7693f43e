"""Views of structured runs: Newton traces, the global ranking, kept-unit maps (live, replayed, compared).

Hand-built events check the view model exactly; two real tiny-llama runs (numerical and flap,
structured:30%) check that the app's Run replay and Compare tab draw what the engine recorded.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from app import compare_tab, runs_tab, views
from tests.helpers.synthetic_runs import write_run
from toolkit.api import RunConfig, list_runs, run
from toolkit.compare import structure as compare_structure
from toolkit.events import GlobalRanking, RunStarted, SolverStep, UnitsRemoved
from toolkit.figures import structure as viz_structure
from toolkit.live.structure import fold_structure, kept_counts
from toolkit.live.view import RunView, fold


def _ranking(**extra: object) -> GlobalRanking:
    fields = {"method": "numerical", "allocation": "param_weighted", "ratio": 0.3, "achieved_ratio": 0.31,
              "threshold": 0.5, "scores": [0.1, 0.5, 0.9], "heads_removed": 1, "heads_total": 2,
              "channels_removed": 1, "channels_total": 4, "params_removed": 31, "params_total": 100,
              "candidates": 6, "head_ranks": [1, 5], "head_values": [0.3, 0.9], "channel_ranks": [0, 2, 3, 4],
              "channel_values": [0.1, 0.5, 0.6, 0.7]}
    return GlobalRanking(**{**fields, **extra})  # type: ignore[arg-type]


def _units(layer: int, unit: str, kept_map: str) -> UnitsRemoved:
    kept = kept_map.count("1")
    return UnitsRemoved(layer=layer, unit=unit, kept=kept, removed=len(kept_map) - kept, params_before=10,
                        params_after=5, rel_error=0.1, rel_error_uncompensated=0.2, kept_map=kept_map)


def _step(layer: int, name: str, step: int, value: float, solver: str = "closed_form") -> SolverStep:
    return SolverStep(layer=layer, name=name, solver=solver, step=step, objective=value)


def _started() -> RunStarted:
    return RunStarted(run_id="r1", model="tiny-llama", method="numerical", sparsity="structured:30%", options={},
                      protocol={}, num_layers=2, linears=[], device="cpu")


def test_fold_keeps_every_layer_newton_trace_the_ranking_and_kept_maps() -> None:
    events = [_started(), _step(0, "o", 0, 4.0), _step(0, "o", 1, 1.0), _step(1, "down", 0, 9.0),
              _step(1, "down", 1, 3.0), _step(0, "q", 0, 7.0, solver="fista"), _ranking(),
              _units(0, "heads", "101"), _units(0, "kv_heads", "1"), _units(0, "channels", "1100"),
              _units(1, "heads", "011")]
    view = fold(events)
    assert view.structure.newton == {(0, "o"): [(0, 4.0), (1, 1.0)], (1, "down"): [(0, 9.0), (1, 3.0)]}
    assert view.structure.ranking == events[6]
    assert view.structure.kept == {"heads": {0: "101", 1: "011"}, "channels": {0: "1100"}}
    assert kept_counts(view.structure.kept["heads"]) == [(0, 2, 3), (1, 2, 3)]
    fresh = view.apply(_started())  # a new run starts from an empty structure
    assert not fresh.structure.active


def test_newton_figure_one_line_per_layer_and_projection() -> None:
    newton = {(0, "o"): [(0, 4.0), (1, 1.0)], (0, "down"): [(0, 8.0), (1, 2.0)], (1, "o"): [(0, 5.0), (1, 0.0)]}
    fig = viz_structure.newton_figure(newton)
    go.Figure(fig.to_dict())  # valid plotly
    assert len(fig.data) == 3 and [t.showlegend for t in fig.data] == [True, True, False]
    assert list(fig.data[0].x) == [0, 1] and list(fig.data[0].y) == [8.0, 2.0]  # (0, "down") sorts first
    assert fig.data[2].y[1] is None  # f = 0 cannot sit on a log axis: a gap, not a fake value
    assert fig.layout.yaxis.type == "log" and "2 layers" in fig.layout.title.text
    assert "no Newton trace" in viz_structure.newton_figure({}).layout.annotations[0].text


def test_ranking_figure_colours_heads_and_channels_and_draws_the_threshold() -> None:
    fig = viz_structure.ranking_figure(_ranking())
    go.Figure(fig.to_dict())
    channels, heads = fig.data  # heads drawn last, on top of the many channels
    assert list(heads.x) == [1, 5] and list(heads.y) == [0.3, 0.9]
    assert list(channels.x) == [0, 2, 3, 4] and heads.marker.color != channels.marker.color
    (line,) = fig.layout.shapes
    assert line.y0 == line.y1 == 0.5
    assert "1 of 2 heads" in fig.layout.title.text and "1 of 4 channels" in fig.layout.title.text
    assert "31.0%" in fig.layout.title.text
    nothing = viz_structure.ranking_figure(_ranking(threshold=-math.inf))
    assert not nothing.layout.shapes  # nothing removed: no line
    old = viz_structure.ranking_figure(_ranking(head_ranks=[], head_values=[], channel_ranks=[], channel_values=[]))
    assert len(old.data) == 1 and list(old.data[0].y) == [0.1, 0.5, 0.9]  # older runs: the plain sample


def test_kept_map_figure_shows_kept_units_per_layer() -> None:
    kept = {"heads": {0: "101", 1: "011"}, "channels": {0: "1" * 200 + "0" * 56, 1: "0" * 256}}
    fig = viz_structure.kept_map_figure(kept)
    go.Figure(fig.to_dict())
    heads, channels = fig.data
    np.testing.assert_array_equal(np.asarray(heads.z), [[1, 0, 1], [0, 1, 1]])
    assert np.asarray(channels.z).shape == (2, 128)  # 256 channels in bins of 2
    assert np.asarray(channels.z)[0, :100].min() == 1 and np.asarray(channels.z)[1].max() == 0
    captions = [a.text for a in fig.layout.annotations]
    assert captions == ["heads (by index): 4 of 6 kept", "channels (by index): bins of 2, 200 of 512 kept"]
    side = viz_structure.kept_compare_figure({"A": kept, "B": {"heads": kept["heads"]}})
    assert len(side.data) == 4 and side.layout.xaxis.domain[1] < side.layout.xaxis2.domain[0]
    assert "no kept units" in viz_structure.kept_map_figure({}).layout.annotations[0].text


def test_render_sends_the_structured_figures() -> None:
    view = fold([_started(), _step(0, "o", 0, 4.0), _step(0, "o", 1, 1.0), _ranking(), _units(0, "heads", "10")])
    out, revisions = views.render(view, 0.0)
    assert "Newton" in out["solver"].layout.title.text and len(out["ranking"].data) == 2
    assert len(out["kept"].data) == 1
    again, _ = views.render(view.apply(_units(1, "heads", "01")), 0.0, revisions)
    assert set(again) & set(views.FIGURES) == {"kept"}  # only the changed figure travels
    idle, _ = views.render(RunView(), 0.0)
    assert "structured runs draw here" in idle["ranking"].layout.annotations[0].text


def test_kept_masks_and_overlap_by_hand() -> None:
    a = {"heads": {0: "110", 1: "011"}, "channels": {0: "1010"}}
    b = {"heads": {0: "110", 1: "110"}, "channels": {0: "1010"}}
    np.testing.assert_array_equal(compare_structure.kept_mask(a, "heads"), [[1, 1, 0], [0, 1, 1]])
    heads, channels = compare_structure.kept_overlap({"A": a, "B": b})
    assert heads["iou"] == pytest.approx(3 / 5) and heads["hamming"] == pytest.approx(2 / 6)
    assert channels["iou"] == 1.0 and channels["pair"] == "channels: A vs B"


# -- real tiny-llama runs through the app's handlers -------------------------------------------------
@pytest.fixture(scope="module")
def structured_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    runs_dir = tmp_path_factory.mktemp("runs")
    for method in ("numerical", "flap"):
        config = RunConfig(model="tiny-llama", method=method, sparsity="structured:30%", nsamples=4, seqlen=32,
                           eval_data=None, device="cpu", out_dir=str(runs_dir))
        events = list(run(config))
        assert type(events[-1]).__name__ == "RunFinished", events[-1]
    return runs_dir, [r.run_id for r in sorted(list_runs(runs_dir), key=lambda r: r.run_id)]


def test_replay_of_a_structured_run_draws_newton_ranking_and_kept(structured_runs: tuple[Path, list[str]]) -> None:
    runs_dir, _ = structured_runs
    numerical = next(r for r in list_runs(runs_dir) if r.config["method"] == "numerical")
    events = numerical.events()
    structure = fold_structure(events)
    view = runs_tab.replay_view(numerical.run_id, str(runs_dir))
    ranking = structure.ranking
    assert ranking is not None and ranking.heads_removed + ranking.channels_removed > 0
    assert len(view["ranking"].data) == 2 and view["ranking"].layout.shapes[0].y0 == ranking.threshold
    removed_below = [v for v in view["ranking"].data[1].y if v <= ranking.threshold]
    assert len(removed_below) >= ranking.heads_removed  # every removed head unit lies at or under η
    layers = numerical.structure()[0]["layers"]
    assert len(view["solver"].data) == 2 * len(layers)  # o_proj and down_proj of every layer
    assert all(t.y[-1] < t.y[0] for t in view["solver"].data)  # the Newton step lowers f
    heads, channels = view["kept"].data
    for row, record in zip(np.asarray(heads.z), layers, strict=True):  # the map agrees with structure.json
        assert int(row.sum()) == record["num_heads"]
    width = len(structure.kept["channels"][0])
    assert [round(float(np.asarray(c).mean()) * width) for c in channels.z] == [r["intermediate_size"] for r in layers]


def test_compare_two_structured_runs(structured_runs: tuple[Path, list[str]], tmp_path: Path) -> None:
    runs_dir, ids = structured_runs
    assert set(ids) <= {value for _, value in compare_tab.run_choices(str(runs_dir))}
    view = compare_tab.compare_view(ids, None, "", 4, str(runs_dir))
    assert "kept heads and channels" in view["message"] and "IoU" in view["message"]
    assert len(view["masks"].data) == 4  # heads and channels of each run, side by side
    assert view["overlap"].data[0].name == "IoU of kept units"
    masked = write_run(runs_dir, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%"}, seed=1)
    mixed = compare_tab.compare_view([ids[0], masked.name], None, "", 4, str(runs_dir))
    assert "compare structured runs with structured runs" in mixed["message"] and mixed["masks"] is None  # cleared
