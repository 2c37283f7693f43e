"""ALPS's ADMM panel: drawn from the SolverSteps a real solve emits, and shown by the run view's solver panels."""

from __future__ import annotations

import torch

from tests.helpers.stats import correlated_stats
from toolkit.events import RunStarted, SolverStep
from toolkit.figures.admm import admm_figure, has_admm_trace
from toolkit.figures.registry import RUN_FIGURES, solver_figures
from toolkit.live.view import fold
from toolkit.methods import alps
from toolkit.methods.base import SolveContext
from toolkit.spec.targets import Unstructured


def _alps_steps() -> list[SolverStep]:
    _, stats = correlated_stats(32, tokens=256, seed=0)
    events: list = []
    ctx = SolveContext(layer=2, name="mlp.down_proj", emit=events.append)
    alps.prune(torch.randn(16, 32, generator=torch.Generator().manual_seed(1)), stats, Unstructured(0.5),
               alps.AlpsConfig(), ctx)
    return [e for e in events if isinstance(e, SolverStep)]


def test_admm_figure_draws_rho_residuals_and_support_changes() -> None:
    steps = _alps_steps()
    admm = [s for s in steps if "rho" in s.values]
    assert has_admm_trace(steps) and not has_admm_trace([s for s in steps if "rho" not in s.values])
    fig = admm_figure(steps).to_dict()
    names = [trace["name"] for trace in fig["data"]]
    assert names == ["ρ", "primal ‖Ŵ − D‖", "dual ρ‖ΔD‖", "support change"]
    rho = fig["data"][0]
    assert list(rho["x"]) == [s.step for s in admm], "one point per support check; the PCG steps are left out"
    assert list(rho["y"]) == [s.values["rho"] for s in admm]
    changes = list(fig["data"][3]["y"])
    assert [c is None for c in changes] == [s.values["support_change"] == 0 for s in admm], "zero = a gap on log"
    assert "alps ADMM · layer 2 · mlp.down_proj" in fig["layout"]["title"]["text"]
    assert fig["layout"]["yaxis"]["type"] == "log"


def test_empty_trace_is_a_note() -> None:
    fig = admm_figure([]).to_dict()
    assert not fig["data"] and "ALPS" in fig["layout"]["annotations"][0]["text"]


def test_run_view_shows_both_solver_panels_for_alps() -> None:
    started = RunStarted(run_id="r1", model="tiny-llama", method="alps", sparsity="50%", options={}, protocol={},
                         num_layers=4, linears=["mlp.down_proj"], device="cpu")
    view = fold([started, *_alps_steps()])
    assert RUN_FIGURES["solver"].drawn(view) and RUN_FIGURES["lambda"].drawn(view)
    figures = solver_figures(view)
    assert "alps convergence" in figures["solver"].layout.title.text
    assert "alps ADMM" in figures["lambda"].layout.title.text
