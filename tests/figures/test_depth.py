"""The layer-score bar chart of a depth run: folded from its events, shown in the Run view, removed layers marked."""

from __future__ import annotations

from typing import Any

from app import views
from toolkit.events import DepthScored, RunStarted
from toolkit.figures.depth import KEPT_COLOR, REMOVED_COLOR, depth_figure
from toolkit.figures.registry import ROWS, STRUCTURE_ROW
from toolkit.live.structure import fold_structure
from toolkit.live.view import RunView, fold


def _started() -> RunStarted:
    return RunStarted(run_id="r1", model="tiny-llama", method="depth", sparsity="structured:2 layers", options={},
                      protocol={}, num_layers=5, linears=["mlp.down_proj"], device="cpu")


def _scored(score: str = "bi", angular: list[float] | None = None, removed: list[int] | None = None) -> DepthScored:
    return DepthScored(score=score, num_layers=5, block=2, influence=[0.4, 0.1, 0.3, 0.05, 0.5],
                       angular=angular or [], identity_error=[0.9, 0.2, 0.6, 0.1, 1.2],
                       removed=removed or [1, 3], tokens=96, seconds=0.1)


def test_fold_keeps_the_scores_and_the_run_view_shows_only_the_depth_panel() -> None:
    view = fold([_started(), _scored()])
    assert view.structure.depth is not None and view.structure.depth.removed == [1, 3]
    assert view.structure.active and view.revision["depth"] >= 1
    shown = views.visible(view)
    assert shown["depth"] and not shown["ranking"] and not shown["kept"]
    assert "depth" in ROWS[STRUCTURE_ROW]
    assert not views.visible(RunView())["depth"]
    assert fold_structure([_scored()]).depth == _scored()


def test_bars_mark_the_removed_layers_and_the_title_names_them() -> None:
    fig = depth_figure(_scored())
    data: Any = fig.data
    kept, removed = data
    assert list(kept.x) == [0, 2, 4] and list(kept.y) == [0.4, 0.3, 0.5] and kept.marker.color == KEPT_COLOR
    assert list(removed.x) == [1, 3] and list(removed.y) == [0.1, 0.05] and removed.marker.color == REMOVED_COLOR
    assert [row[0] for row in removed.customdata] == [0.2, 0.1]  # the error of skipping each layer, in the hover
    assert "removed 2 of 5 layers (block influence): 1, 3" in fig.layout.title.text


def test_angular_scores_add_a_line_on_the_right_axis() -> None:
    fig = depth_figure(_scored("angular", angular=[0.3, 0.2, 0.25, 0.4], removed=[1, 2]))
    data: Any = fig.data
    line = data[-1]
    assert line.type == "scatter" and line.yaxis == "y2" and list(line.y) == [0.3, 0.2, 0.25, 0.4]
    assert fig.layout.yaxis2.overlaying == "y" and "angular distance of 2 consecutive layers" in fig.layout.title.text


def test_render_sends_the_depth_figure_and_an_idle_view_a_note() -> None:
    out, _ = views.render(fold([_started(), _scored()]), 0.0)
    assert len(out["depth"].data) == 2
    idle, _ = views.render(RunView(), 0.0)
    assert "depth runs draw here" in idle["depth"].layout.annotations[0].text
