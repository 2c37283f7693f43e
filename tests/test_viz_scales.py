"""Dashboard figures keep their meaning as a run goes: fixed colour scales, discrete rounds, bounded axes."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import pytest

from toolkit import viz
from toolkit.events import SublayerPruned


def valid(fig: go.Figure) -> go.Figure:
    go.Figure(fig.to_dict())
    return fig


def pruned(layer: int, name: str, error: float) -> SublayerPruned:
    return SublayerPruned(layer=layer, name=name, shape=[2, 2], sparsity=0.5, rel_error=error,
                          rel_error_dense=math.nan, damping=math.nan, seconds=0.0)


def test_error_heatmap_colour_scale_is_fixed_as_cells_fill() -> None:
    early = [pruned(0, "q", 0.01)]
    late = [*early, pruned(0, "k", 0.5), pruned(1, "q", 3.0), pruned(1, "k", 0.0)]
    first, second = (valid(viz.error_heatmap(e, num_layers=2, linears=["q", "k"])).data[0] for e in (early, late))
    assert (first.zmin, first.zmax) == (second.zmin, second.zmax) == (-4.0, 0.0)
    assert first.z[0][0] == second.z[0][0] == pytest.approx(-2.0)  # the filled cell keeps its colour
    assert list(second.z[1]) == [0.0, -4.0]  # above 1 and exact 0 clipped to the stated bounds
    assert "fixed 0.0001…1" in second.colorbar.title.text
    assert tuple(second.colorbar.ticktext) == ("0.0001", "0.001", "0.01", "0.1", "1")


def test_error_heatmap_bounds_can_be_chosen() -> None:
    (trace,) = valid(viz.error_heatmap([pruned(0, "q", 0.01)], num_layers=1, bounds=(1e-3, 10.0))).data
    assert (trace.zmin, trace.zmax) == (-3.0, 1.0) and "…10" in trace.colorbar.title.text
