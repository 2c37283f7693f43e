"""Dashboard figures keep their meaning as a run goes: fixed colour scales, discrete rounds, bounded axes."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import pytest

from toolkit.events import LambdaStep, SolverStep, SublayerPruned
from toolkit.figures import run as viz


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


def test_round_colour_bar_is_discrete_with_whole_ticks() -> None:
    steps = [SolverStep(layer=0, name="q", solver="fista", step=k, objective=1.0 / (k + 1), values={"round": k // 3})
             for k in range(9)]
    marker = valid(viz.convergence_figure(steps)).data[0].marker
    assert (marker.cmin, marker.cmax) == (-0.5, 2.5) and tuple(marker.colorbar.tickvals) == (0, 1, 2)
    scale = [tuple(stop) for stop in marker.colorscale]
    assert len(scale) == 6 and scale[0][1] == scale[1][1] != scale[2][1]  # one flat band per round


def lambda_steps(sparsity: list[float]) -> list[LambdaStep]:
    return [LambdaStep(layer=0, name="q", round=r, lam=0.1, lam_low=0.0, lam_high=1.0, e_total=1.0, e_round=0.1,
                       ratio=0.1, xi=0.3, sparsity_before_rounding=value, improved=True)
            for r, value in enumerate(sparsity)]


def test_sparsity_before_rounding_stays_on_0_to_100_percent() -> None:
    for values in ([0.0, 0.0, 0.0], [-0.2, 0.5, 1.3]):
        fig = valid(viz.lambda_figure(lambda_steps(values)))
        assert tuple(fig.layout.yaxis3.range) == (0.0, 1.0)
        assert all(0.0 <= v <= 1.0 for v in fig.data[5].y)


def test_lambda_panel_has_a_legend() -> None:
    fig = valid(viz.lambda_figure(lambda_steps([0.1, 0.2])))
    assert fig.layout.showlegend and all(trace.showlegend is not False for trace in fig.data)
    assert {"λ", "λ high", "λ low", "ξ"} <= {trace.name for trace in fig.data}


def test_solver_panels_hidden_all_run_for_methods_without_a_solver() -> None:
    from app import views
    from tests.helpers.synthetic_runs import run_events
    from toolkit.events import BlockStep
    from toolkit.live.view import RunView

    traced = (SolverStep, LambdaStep, BlockStep)
    plain = [e for e in run_events(method="wanda") if not isinstance(e, traced)]
    view = RunView()
    hidden = {"solver": False, "lambda": False, "refine": False}  # no DSnoT either: its panel stays hidden too
    def panels(shown: dict[str, bool]) -> dict[str, bool]:
        return {name: shown[name] for name in hidden}

    assert panels(views.visible(view)) == hidden  # idle: hidden from the start
    for event in plain:
        assert panels(views.visible(view.apply(event))) == hidden
    fista = RunView()
    for event in run_events():
        fista.apply(event)
    assert panels(views.visible(fista)) == {"solver": True, "lambda": True, "refine": False}
    assert panels(views.visible(fista.apply(run_events(method="wanda")[0]))) == hidden
