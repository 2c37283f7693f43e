"""The frontier: which outputs are on the Pareto front, the figure that draws it, the benchmark's records as points."""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
import pytest

from tests.figures.frontier_records import MIB, RECORDS
from toolkit.figures.frontier import (
    FRONT_NAME,
    FrontierPoint,
    benchmark_point,
    decode_ratio,
    front_steps,
    frontier_figure,
    newest_by_entry,
    pareto_front,
    smaller,
    speed_of,
)

# a: best perplexity; b: faster, worse; c: behind b (slower and worse); d: b's twin; e: no perplexity; f: no speed;
# g: the fastest and the worst
POINTS = [FrontierPoint("a", 10.0, 1.0, 500), FrontierPoint("b", 12.0, 1.5, 400), FrontierPoint("c", 15.0, 1.2, 300),
          FrontierPoint("d", 12.0, 1.5, 400), FrontierPoint("e", math.nan, 2.0, 100),
          FrontierPoint("f", 11.0, None, 200, estimated=True), FrontierPoint("g", 40.0, 2.5, 350)]


def test_the_speed_front_is_the_hand_computed_one() -> None:
    assert pareto_front(POINTS, speed_of) == [True, True, False, True, None, None, True]


def test_a_tie_on_one_figure_and_better_on_the_other_pushes_a_point_off() -> None:
    tied = [FrontierPoint("x", 10.0, 1.0), FrontierPoint("y", 10.0, 1.2), FrontierPoint("z", 9.0, 1.0)]
    assert pareto_front(tied, speed_of) == [False, True, True]


def test_the_size_front_counts_only_sizes_measured_as_saved() -> None:
    # c (300 bytes) is the smallest measured; g (350) is worse than c on both; f's size is only an estimate
    assert pareto_front(POINTS, smaller) == [True, True, True, True, None, None, False]


def test_the_step_line_rises_at_each_front_point_then_runs_flat() -> None:
    xs, ys = front_steps([POINTS[6], POINTS[0], POINTS[1]])
    assert xs == [1.0, 1.0, 1.5, 1.5, 2.5]
    assert ys == [10.0, 12.0, 12.0, 40.0, 40.0]


def _traces(fig: go.Figure) -> list[dict[str, Any]]:
    return fig.to_dict()["data"]


def test_the_figure_draws_the_front_every_measured_point_and_names_the_rest() -> None:
    fig = frontier_figure(POINTS)
    go.Figure(fig.to_dict())  # plotly's validation: the builder skips it
    traces = _traces(fig)
    front = [t for t in traces if t.get("name") == FRONT_NAME]
    assert len(front) == 1
    assert list(front[0]["x"]) == [1.0, 1.0, 1.5, 1.5, 1.5, 1.5, 2.5]  # a, b, d (b's twin), g
    assert list(front[0]["y"]) == [10.0, 12.0, 12.0, 12.0, 12.0, 40.0, 40.0]
    points = {t["text"][0]: t for t in traces if t.get("text")}
    assert set(points) == {"a", "b", "c", "d", "g"}
    assert points["a"]["marker"]["size"] > points["c"]["marker"]["size"]  # 500 bytes against 300
    assert points["a"]["marker"]["size"] ** 2 / points["c"]["marker"]["size"] ** 2 == pytest.approx(500 / 300)
    assert "on the Pareto front" in points["b"]["hovertext"][0]
    assert "on the Pareto front" not in points["c"]["hovertext"][0]
    assert fig.layout.yaxis.type == "log"
    dense = next(t for t in traces if t.get("name", "").startswith("dense speed"))
    assert list(dense["x"]) == [1.0, 1.0] and list(dense["y"]) == [10.0, 40.0]  # the drawn perplexities' span
    notes = " ".join(a.text for a in fig.layout.annotations)
    assert "e" in notes.split(": ")[-1] and "f" in notes.split(": ")[-1]


def test_an_estimated_size_is_a_hollow_marker_in_plotly_and_in_the_paper_export() -> None:
    from toolkit.figures.paper import to_matplotlib

    fig = frontier_figure([FrontierPoint("saved", 10.0, 1.0, 500), FrontierPoint("est", 12.0, 1.3, 200,
                                                                                  estimated=True)])
    symbols = {t["text"][0]: t["marker"]["symbol"] for t in _traces(fig) if t.get("text")}
    assert symbols == {"saved": "circle", "est": "circle-open"}
    lines = [line for ax in to_matplotlib(fig).axes for line in ax.get_lines() if len(line.get_xdata())
             and not math.isnan(float(line.get_xdata()[0]))]
    faces = {float(line.get_xdata()[0]): line.get_markerfacecolor() for line in lines if line.get_marker() == "o"}
    assert faces[1.3] == "none" and faces[1.0] != "none"


def test_no_measured_point_gives_a_note_not_an_error() -> None:
    fig = frontier_figure([FrontierPoint("f", 11.0, None, 200)])
    assert not _traces(fig) and "no output" in fig.layout.annotations[0].text


def test_benchmark_records_become_points_with_their_ratio_and_size() -> None:
    dense, width, *_, awq = [benchmark_point(r) for r in RECORDS]
    assert dense.speed == pytest.approx(1.0) and dense.group == "dense"
    assert width.speed == pytest.approx(26.0 / 20.0) and width.bytes == 400 * MIB and not width.estimated
    assert decode_ratio(RECORDS[1], 8) == pytest.approx(1.3)
    assert awq.speed is None and awq.estimated and awq.bytes == 160 * MIB and "AWQ cannot be saved" in awq.note


def test_the_last_record_of_an_entry_wins_in_first_seen_order() -> None:
    again = {**RECORDS[1], "ppl": 24.0}
    chosen = newest_by_entry([*RECORDS[:3], again, {"benchmark": "measure", "entry": "x"}])
    assert [r["entry"] for r in chosen] == ["dense", "numerical 20%", "depth 8 layers"]
    assert chosen[1]["ppl"] == 24.0
