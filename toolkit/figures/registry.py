"""The Run view's figures, named once, shared by the app and the notebook widgets.

Each is a :class:`RunFigure`: a name and a builder of a :class:`~toolkit.live.view.RunView`.

Torch-free (CONTRIBUTING.md R7, R8). A new Run-view figure is a builder plus one entry in
:data:`RUN_FIGURES`: the app's Run tab and the notebook widgets lay their panels out from
:data:`ROWS`, and the live updates redraw a figure when a section it ``reads`` changes. The two
solver panels are drawn from one :func:`~toolkit.live.solver.solver_snapshot`, so they always show
the same linear.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolkit.figures import admm as viz_admm
from toolkit.figures import allocation as viz_allocation
from toolkit.figures import depth as viz_depth
from toolkit.figures import quant as viz_quant
from toolkit.figures import run as viz
from toolkit.figures import structure as viz_structure
from toolkit.live.solver import solver_snapshot
from toolkit.live.view import RunView


@dataclass(frozen=True)
class RunFigure:
    """One figure of the Run view and where it goes.

    ``build(view, key)`` returns its plotly figure (``key`` keeps the zoom per run). ``row``: the
    panel row it sits in (rows and the figures in them keep the registry's order). ``reads``: the
    :attr:`RunView.revision` sections whose change redraws it (empty: its own name). ``explained_by``:
    the key of its "How to read this" text in the app (empty: none). ``export``: an export button
    under it once the run finished. ``hidden_until_drawn``: shown only while ``drawn(view)`` holds,
    i.e. once the run fills it (the solver panels, a structured run's ranking and kept units), so a
    page shows the panels of the method that runs and no others.
    """

    name: str
    build: Callable[[RunView, str], Any]
    row: str
    reads: tuple[str, ...] = ()
    explained_by: str = ""
    export: bool = False
    hidden_until_drawn: bool = False
    drawn: Callable[[RunView], bool] = lambda view: True


def solver_figures(view: RunView) -> dict[str, Any]:
    """The convergence and λ panels drawn from one :func:`~toolkit.live.solver.solver_snapshot`: one linear in both."""
    key, snap = view.run_id or "idle", solver_snapshot(view)
    solver = viz.convergence_figure(snap.solver, snap.blocks, revision=key, height=viz.LAMBDA_HEIGHT,
                                    linear=snap.label)
    if not snap.lambdas and viz_quant.has_projection_trace(snap.solver):  # AWP: projection trace
        return {"solver": solver, "lambda": viz_quant.projection_figure(snap.solver, revision=key)}
    if not snap.lambdas and viz_admm.has_admm_trace(snap.solver):  # ALPS: ρ, residuals, support changes
        return {"solver": solver, "lambda": viz_admm.admm_figure(snap.solver, revision=key)}
    lam = viz.lambda_figure(snap.lambdas, revision=key, linear=snap.label if snap.solver else "")
    return {"solver": solver, "lambda": lam}


def _solver(view: RunView, key: str) -> Any:
    if view.structure.newton:  # a structured run: the Newton trace of every layer
        return viz_structure.newton_figure(view.structure.newton, revision=key, height=viz.LAMBDA_HEIGHT)
    return solver_figures(view)["solver"]


def _traced(view: RunView) -> bool:
    """A solver trace to draw: FISTAPruner's or AWP's steps, Thanos' blocks, a structured run's Newton steps."""
    return bool(view.solver.steps or view.blocks.steps or view.structure.newton)


def _lambda_traced(view: RunView) -> bool:
    """FISTAPruner's λ bisection, AWP's projection trace or ALPS's ADMM trace."""
    return (bool(view.lambdas.steps) or viz_quant.has_projection_trace(view.solver.steps)
            or viz_admm.has_admm_trace(view.solver.steps))


STRUCTURE_ROW = "structure"  # heads, channels or layers a block-scope run removed (widgets: those runs only)
ALLOCATION_ROW = "allocation"  # each layer's sparsity (uniform, OWL, a ratio file) and DSnoT's refinement
# The solver panels sit in the heat-map's row, after it: a FISTAPruner run shows heat-map, convergence and λ
# side by side (the layer error wraps below them); without a solver trace they are hidden and the layer error
# takes their place beside the heat-map.
RUN_FIGURES: dict[str, RunFigure] = {f.name: f for f in (
    RunFigure("heatmap", lambda view, key: viz.error_heatmap(view.pruned, num_layers=view.num_layers,
                                                             linears=view.linears, revision=key),
              row="errors", explained_by="heatmap", export=True),
    RunFigure("solver", _solver, row="errors", explained_by="convergence", hidden_until_drawn=True, drawn=_traced),
    RunFigure("lambda", lambda view, key: solver_figures(view)["lambda"], row="errors", explained_by="lambda",
              hidden_until_drawn=True, drawn=_lambda_traced),
    RunFigure("layers", lambda view, key: viz.layer_error_figure(view.layers_done, num_layers=view.num_layers,
                                                                revision=key,
                                                                height=viz.heatmap_height(view.num_layers),
                                                                why=viz.error_not_measured(view.protocol)),
              row="errors", explained_by="layers"),
    RunFigure("allocation", lambda view, key: viz_allocation.allocation_view_figure(view.allocation, revision=key),
              row=ALLOCATION_ROW, reads=("allocation",), explained_by="allocation", export=True,
              hidden_until_drawn=True, drawn=lambda view: view.allocation.applies),
    RunFigure("refine", lambda view, key: viz_allocation.refine_figure(view.allocation.refined, revision=key),
              row=ALLOCATION_ROW, reads=("refine",), explained_by="refine", hidden_until_drawn=True,
              drawn=lambda view: bool(view.allocation.refined)),
    RunFigure("ranking", lambda view, key: viz_structure.ranking_figure(view.structure.ranking, revision=key),
              row=STRUCTURE_ROW, explained_by="ranking", hidden_until_drawn=True,
              drawn=lambda view: view.structure.ranking is not None),
    RunFigure("kept", lambda view, key: viz_structure.kept_map_figure(view.structure.kept, revision=key),
              row=STRUCTURE_ROW, explained_by="kept", hidden_until_drawn=True,
              drawn=lambda view: bool(view.structure.kept)),
    RunFigure("depth", lambda view, key: viz_depth.depth_figure(view.structure.depth, revision=key),
              row=STRUCTURE_ROW, explained_by="depth", hidden_until_drawn=True,
              drawn=lambda view: view.structure.depth is not None),
)}
FIGURES = tuple(RUN_FIGURES)
ROWS: dict[str, tuple[str, ...]] = {row: tuple(f.name for f in RUN_FIGURES.values() if f.row == row)
                                    for row in dict.fromkeys(f.row for f in RUN_FIGURES.values())}
SOLVER_PANELS = ("solver", "lambda")  # drawn from one snapshot, always together


def revision(view: RunView, name: str) -> int:
    """The figure's data revision: the sum of the revision counters of the sections it reads (they only grow)."""
    return sum(view.revision.get(section, 0) for section in RUN_FIGURES[name].reads or (name,))


def figure(view: RunView, name: str) -> Any:
    """The plotly figure ``name`` (one of :data:`FIGURES`) of ``view``."""
    return RUN_FIGURES[name].build(view, view.run_id or "idle")
