"""Every log axis is labelled at each decade with whole values (464 never sits beside a bare "5")."""

from __future__ import annotations

import math

import pytest

from toolkit.events import LambdaStep
from toolkit.figures import log_ticks, sweep
from toolkit.figures import run as viz


def test_a_tick_at_every_decade_the_data_reaches() -> None:
    ticks, labels, bounds = log_ticks.log_ticks([0.003, 2.0, 4.6e4])
    assert ticks == [0.001, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0]
    assert labels == ["0.001", "0.01", "0.1", "1", "10", "100", "1000", "10000", "1e+05"]
    assert bounds is None  # a wide range keeps plotly's autorange


def test_under_two_decades_the_2_and_5_multiples_are_labelled_with_their_whole_value() -> None:
    ticks, labels, bounds = log_ticks.log_ticks([30.0, 464.0])
    assert ticks == [20.0, 50.0, 100.0, 200.0, 500.0]
    assert labels == ["20", "50", "100", "200", "500"]  # 500, not "5"
    assert bounds is not None and bounds[0] < math.log10(30.0) and bounds[1] > math.log10(464.0)
    assert bounds[0] == pytest.approx(math.log10(20.0) - 0.03 * math.log10(25.0))


def test_under_one_decade_every_multiple_shows_so_at_least_two_ticks_are_labelled() -> None:
    ticks, labels, _ = log_ticks.log_ticks([24.0, 31.0])
    assert ticks == [20.0, 30.0, 40.0] and labels == ["20", "30", "40"]
    assert log_ticks.log_ticks([float("nan"), -1.0, 0.0]) == ([], [], None)


def test_error_bars_widen_the_ticked_range() -> None:
    trace = {"type": "scatter", "x": [0.5], "y": [30.0], "error_y": {"type": "data", "array": [90.0]}}
    assert max(log_ticks.axis_values([trace], "yaxis")) == pytest.approx(120.0)
    assert log_ticks.axis_values([trace], "yaxis2") == []  # drawn on another axis


def test_the_sweep_curve_labels_each_decade_on_its_perplexity_axis() -> None:
    points = [{"method": "wanda", "sparsity": s, "pattern": "unstructured", "achieved_sparsity": a, "ppl": p}
              for s, a, p in (("10%", 0.1, 21.0), ("50%", 0.5, 35.0), ("90%", 0.9, 4640.0))]
    axis = sweep.sweep_figure(points, dense_ppl=20.0).to_dict()["layout"]["yaxis"]
    assert axis["type"] == "log" and list(axis["tickvals"]) == [10.0, 100.0, 1000.0, 10000.0]
    assert list(axis["ticktext"]) == ["10", "100", "1000", "10000"]


def test_the_lambda_panel_gets_decade_ticks_through_the_shared_figure() -> None:
    steps = [LambdaStep(layer=0, name="q", round=r, lam=10.0 ** (r - 5), lam_low=0.0, lam_high=1e6, e_total=1.0,
                        e_round=0.1, ratio=0.1, xi=0.3, sparsity_before_rounding=0.5, improved=True) for r in range(4)]
    axis = viz.lambda_figure(steps).to_dict()["layout"]["yaxis"]
    assert axis["type"] == "log"
    assert [math.log10(v) for v in axis["tickvals"]] == pytest.approx(list(range(-5, 7)))
    assert axis["ticktext"][-1] == "1e+06" and axis["ticktext"][0] == "1e-05"
