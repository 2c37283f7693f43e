"""The recovery loss curve (toolkit/figures/recovery.py): a pure builder, checked on its data and layout."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import pytest

from toolkit.figures.recovery import loss_figure, recovery_figure, running_mean
from toolkit.live.recovery import RecoveryView


def test_running_mean_by_hand() -> None:
    assert running_mean([4.0, 2.0, 6.0], width=2) == [4.0, 3.0, 4.0]
    assert running_mean([1.0, math.nan, 3.0], width=5) == [1.0, 1.0, 2.0]


def test_loss_figure_draws_each_step_and_the_mean_on_a_fixed_axis() -> None:
    fig = loss_figure([1, 2, 3], [3.0, 2.0, 1.0], total_steps=10, perplexity={"wiki": (40.0, 30.5)}, revision="r")
    raw, mean = fig.data
    assert list(raw.x) == [1, 2, 3] and list(raw.y) == [3.0, 2.0, 1.0]
    assert list(mean.y) == pytest.approx([3.0, 2.5, 2.0])
    assert list(fig.layout.xaxis.range) == [0.5, 10.5]
    assert "ppl wiki 40.000 → 30.500" in fig.layout.title.text
    go.Figure(fig.to_dict())  # valid plotly, although built without validation


def test_an_empty_curve_is_a_note_and_a_view_draws_its_steps() -> None:
    empty = recovery_figure(RecoveryView())
    assert not empty.data and "appears here" in empty.layout.annotations[0].text
    view = RecoveryView(status="running", run_id="r2", steps=4, step_numbers=[1], losses=[5.0],
                        ppl_before={"wiki": 40.0})
    fig = recovery_figure(view)
    assert list(fig.data[0].y) == [5.0] and "ppl wiki 40.000 → …" in fig.layout.title.text
