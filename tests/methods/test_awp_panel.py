"""AWP's solver panel for a quantize-only run: the events a run emits draw the loss, ‖C‖_F/‖C‖₂ and codes moved."""

from __future__ import annotations

import plotly.graph_objects as go
import torch

from tests.helpers.stats import correlated_stats
from toolkit.events import SolverStep
from toolkit.figures.registry import solver_figures
from toolkit.live.view import fold
from toolkit.methods import awp
from toolkit.methods.base import SolveContext
from toolkit.spec.compression import QuantSpec


def test_a_quantize_only_run_draws_the_convergence_and_the_codes_moved_from_rtn() -> None:
    _, stats = correlated_stats(64, seed=2)
    W = torch.randn(32, 64, generator=torch.Generator().manual_seed(4))
    events: list = []
    awp.prune(W, stats, None, awp.SPEC.make_config({"step": "spectral"}),
              SolveContext(layer=3, name="mlp.down_proj", quant=QuantSpec(2, 16), emit=events.append))
    steps = [e for e in events if isinstance(e, SolverStep)]
    figures = solver_figures(fold(events))
    convergence, projection = (go.Figure(figures[k].to_dict()).to_dict() for k in ("solver", "lambda"))
    title = convergence["layout"]["title"]["text"]
    assert "‖C‖_F/‖C‖₂" in title and "mlp.down_proj" in title
    assert list(convergence["data"][0]["y"]) == [s.objective for s in steps]
    assert len(convergence["data"]) == 1  # RTN's start: no reference line for RTN's objective
    _, codes, bits = projection["data"]
    assert codes["name"] == "codes changed"
    assert "round-to-nearest" in projection["layout"]["annotations"][1]["text"]
    moved = [s.values["codes_changed"] for s in steps if "proj_dist" in s.values]
    assert list(codes["y"]) == moved and max(moved) > 0  # the spectral step moves codes on this layer
    assert set(bits["y"]) == {2.0}


def test_a_run_started_at_gptq_names_rtns_objective_in_the_panel() -> None:
    _, stats = correlated_stats(64, seed=2)
    W = torch.randn(32, 64, generator=torch.Generator().manual_seed(4))
    events: list = []
    awp.prune(W, stats, None, awp.SPEC.make_config({"quant_init": "gptq", "grid_update": "nearest"}),
              SolveContext(layer=3, name="mlp.down_proj", quant=QuantSpec(3, 16), emit=events.append))
    first = next(e for e in events if isinstance(e, SolverStep))
    convergence = go.Figure(solver_figures(fold(events))["solver"].to_dict()).to_dict()
    title = convergence["layout"]["title"]["text"]
    assert f"RTN's objective {first.values['objective_rtn']:.3g}" in title
    assert title.index("mlp.down_proj") < title.index("<br>") < title.index("RTN's objective")  # its own line
    assert first.objective < first.values["objective_rtn"]  # the start (GPTQ's) is below RTN's
    _, reference = convergence["data"]  # RTN's objective drawn as a dashed line over every iteration
    assert list(reference["y"]) == [first.values["objective_rtn"]] * 2 and reference["line"]["dash"] == "dash"
    steps = [e.step for e in events if isinstance(e, SolverStep)]
    assert list(reference["x"]) == [steps[0], steps[-1]]
