"""The Run view's figures, named once, shared by the app and the notebook widgets.

Each is a :class:`RunFigure`: a name and a builder of a :class:`~toolkit.live.view.RunView`.

Torch-free (CONTRIBUTING.md R7, R8). A new Run-view figure is a builder plus one entry in
:data:`RUN_FIGURES`: the app, the widgets and the live updates iterate :data:`FIGURES`. Its name is
also a section of :attr:`RunView.revision` (the events that change it bump that section). The two
solver panels are drawn from one :func:`~toolkit.live.solver.solver_snapshot`, so they always show
the same linear.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolkit.figures import quant as viz_quant
from toolkit.figures import run as viz
from toolkit.figures import structure as viz_structure
from toolkit.live.solver import solver_snapshot
from toolkit.live.view import RunView


@dataclass(frozen=True)
class RunFigure:
    """One figure of the Run view: ``build(view, key)`` returns its plotly figure (``key`` keeps zoom per run)."""

    name: str
    build: Callable[[RunView, str], Any]


def solver_figures(view: RunView) -> dict[str, Any]:
    """The convergence and λ panels drawn from one :func:`~toolkit.live.solver.solver_snapshot`: one linear in both."""
    key, snap = view.run_id or "idle", solver_snapshot(view)
    solver = viz.convergence_figure(snap.solver, snap.blocks, revision=key, height=viz.LAMBDA_HEIGHT,
                                    linear=snap.label)
    if not snap.lambdas and viz_quant.has_projection_trace(snap.solver):  # AWP: projection trace
        return {"solver": solver, "lambda": viz_quant.projection_figure(snap.solver, revision=key)}
    lam = viz.lambda_figure(snap.lambdas, revision=key, linear=snap.label if snap.solver else "")
    return {"solver": solver, "lambda": lam}


def _solver(view: RunView, key: str) -> Any:
    if view.structure.newton:  # a structured run: the Newton trace of every layer
        return viz_structure.newton_figure(view.structure.newton, revision=key, height=viz.LAMBDA_HEIGHT)
    return solver_figures(view)["solver"]


RUN_FIGURES: dict[str, RunFigure] = {f.name: f for f in (
    RunFigure("heatmap", lambda view, key: viz.error_heatmap(view.pruned, num_layers=view.num_layers,
                                                             linears=view.linears, revision=key)),
    RunFigure("layers", lambda view, key: viz.layer_error_figure(view.layers_done, num_layers=view.num_layers,
                                                                revision=key,
                                                                height=viz.heatmap_height(view.num_layers))),
    RunFigure("solver", _solver),
    RunFigure("lambda", lambda view, key: solver_figures(view)["lambda"]),
    RunFigure("ranking", lambda view, key: viz_structure.ranking_figure(view.structure.ranking, revision=key)),
    RunFigure("kept", lambda view, key: viz_structure.kept_map_figure(view.structure.kept, revision=key)),
)}
FIGURES = tuple(RUN_FIGURES)
SOLVER_PANELS = ("solver", "lambda")


def figure(view: RunView, name: str) -> Any:
    """The plotly figure ``name`` (one of :data:`FIGURES`) of ``view``."""
    return RUN_FIGURES[name].build(view, view.run_id or "idle")
