"""The Run view's figures of a :class:`toolkit.live.view.RunView`, shared by the app and the notebook widgets.

Torch-free (CONTRIBUTING.md R7). The two solver panels are drawn from one
:func:`~toolkit.live.solver.solver_snapshot`, so they always show the same linear.
"""

from __future__ import annotations

from typing import Any

from toolkit.figures import quant as viz_quant
from toolkit.figures import run as viz
from toolkit.figures import structure as viz_structure
from toolkit.live.solver import solver_snapshot
from toolkit.live.view import RunView

FIGURES = ("heatmap", "layers", "solver", "lambda", "ranking", "kept")


def figure(view: RunView, name: str) -> Any:
    """The plotly figure ``name`` (one of :data:`FIGURES`) of ``view``."""
    key = view.run_id or "idle"
    if name == "heatmap":
        return viz.error_heatmap(view.pruned, num_layers=view.num_layers, linears=view.linears, revision=key)
    if name == "layers":
        return viz.layer_error_figure(view.layers_done, num_layers=view.num_layers, revision=key,
                                      height=viz.heatmap_height(view.num_layers))
    if name == "solver" and view.structure.newton:  # a structured run: the Newton trace of every layer
        return viz_structure.newton_figure(view.structure.newton, revision=key, height=viz.LAMBDA_HEIGHT)
    if name == "ranking":
        return viz_structure.ranking_figure(view.structure.ranking, revision=key)
    if name == "kept":
        return viz_structure.kept_map_figure(view.structure.kept, revision=key)
    return solver_figures(view)[name]


SOLVER_PANELS = ("solver", "lambda")


def solver_figures(view: RunView) -> dict[str, Any]:
    """The convergence and λ panels drawn from one :func:`~toolkit.live.solver.solver_snapshot`: one linear in both."""
    key, snap = view.run_id or "idle", solver_snapshot(view)
    solver = viz.convergence_figure(snap.solver, snap.blocks, revision=key, height=viz.LAMBDA_HEIGHT,
                                    linear=snap.label)
    if not snap.lambdas and viz_quant.has_projection_trace(snap.solver):  # AWP: projection trace
        return {"solver": solver, "lambda": viz_quant.projection_figure(snap.solver, revision=key)}
    lam = viz.lambda_figure(snap.lambdas, revision=key, linear=snap.label if snap.solver else "")
    return {"solver": solver, "lambda": lam}
