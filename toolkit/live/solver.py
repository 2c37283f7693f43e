"""One consistent snapshot of a run's solver panels: the convergence and λ traces of the *same* linear.

A :class:`~toolkit.live.view.RunView` keeps the latest solver, block and λ traces separately, and they
move to the next linear at different events: FISTAPruner emits a linear's SolverSteps of round r,
then its LambdaStep for round r, so for the first round of linear k the solver trace is already
k's while the λ trace is still k − 1's. Drawing each trace as it stands would put two different
linears side by side. :func:`solver_snapshot` picks the linear once (the one the solver works
on now) and keeps only the traces of that linear. Torch-free, like :mod:`toolkit.live.view`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolkit.live.view import RunView


@dataclass(frozen=True)
class SolverSnapshot:
    """The traces both solver panels draw, all of linear (``layer``, ``name``); layer −1 = none yet."""

    layer: int = -1
    name: str = ""
    solver: list[Any] = field(default_factory=list)  # SolverStep
    blocks: list[Any] = field(default_factory=list)  # BlockStep
    lambdas: list[Any] = field(default_factory=list)  # LambdaStep

    @property
    def label(self) -> str:
        """``layer 3 · mlp.up_proj`` (as in the panel titles), "" before any trace."""
        return f"layer {self.layer} · {self.name}" if self.layer >= 0 else ""


def solver_snapshot(view: RunView) -> SolverSnapshot:
    """The newest traced linear of ``view`` and its solver, block and λ steps (the others dropped).

    The newest linear is that of the trace that moved last; a trace still holding an earlier
    linear contributes nothing, so both panels name the same linear after any event order.
    """
    traces = [trace for trace in (view.solver, view.blocks, view.lambdas) if trace.steps]
    if not traces:
        return SolverSnapshot()
    lead = max(traces, key=lambda trace: trace.seen)
    key = (lead.layer, lead.name)

    def mine(trace: Any) -> list[Any]:
        return list(trace.steps) if trace.steps and (trace.layer, trace.name) == key else []

    return SolverSnapshot(lead.layer, lead.name, mine(view.solver), mine(view.blocks), mine(view.lambdas))
