"""Fold a block-scope run's events into a plain :class:`StructureView` (torch-free, like :mod:`toolkit.live.view`).

A structured run (numerical, flap, wanda-sp, magnitude-sp; :mod:`toolkit.engine.block.driver`) emits, on
top of the events every run has:

- ``SolverStep`` per output projection (o_proj, down_proj) of every layer: Numerical Pruning's
  objective f(z) of Eq. 3 at z₀ and after each Newton step (the closed form is one exact step);
- one ``GlobalRanking``: the ascending ranking of every head unit and channel and the threshold;
- ``UnitsRemoved`` per layer and kind, with the ``kept_map`` of that layer's heads / channels;
- a depth run (``--method depth``, :mod:`toolkit.engine.block.depth`): one ``DepthScored`` with every
  layer's score and the removed layers.

Unlike :class:`toolkit.live.view.RunView`'s solver trace (the current linear only), the view keeps the
Newton trace of every layer: at most layers × 2 × (``newton_steps`` + 1) numbers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from toolkit.events import DepthScored, Event, GlobalRanking, SolverStep, UnitsRemoved

KEPT_KINDS = ("heads", "channels")  # the map's panels; "kv_heads" follows from heads and is not drawn
SCORE_SOLVERS = ("closed_form", "newton")  # the SolverStep.solver names of Numerical Pruning's scores


@dataclass
class StructureView:
    """The structured-run part of a live view: Newton traces, the global ranking, kept units per layer.

    ``newton`` maps ``(layer, projection)`` to ``[(step, f(z)), ...]``; ``kept`` maps a unit kind
    ("heads", "channels") to ``{layer: kept_map}`` ("1" kept, "0" removed, one character per
    original unit). ``depth``: a depth run's layer scores and removed layers.
    """

    newton: dict[tuple[int, str], list[tuple[int, float]]] = field(default_factory=dict)
    ranking: GlobalRanking | None = None
    kept: dict[str, dict[int, str]] = field(default_factory=dict)
    depth: DepthScored | None = None

    @property
    def active(self) -> bool:
        """True once any structured event arrived."""
        return bool(self.newton or self.ranking is not None or self.kept or self.depth is not None)

    def apply(self, event: Event) -> set[str]:
        """Fold one event; returns the sections it changed ("solver", "ranking", "kept", "depth")."""
        if isinstance(event, DepthScored):
            self.depth = event
            return {"depth"}
        if isinstance(event, SolverStep) and event.solver in SCORE_SOLVERS:
            self.newton.setdefault((int(event.layer), event.name), []).append((int(event.step), event.objective))
            return {"solver"}
        if isinstance(event, GlobalRanking):
            self.ranking = event
            return {"ranking"}
        if isinstance(event, UnitsRemoved) and event.unit in KEPT_KINDS and event.kept_map:
            self.kept.setdefault(event.unit, {})[int(event.layer)] = event.kept_map
            return {"kept"}
        return set()


def fold_structure(events: Iterable[Event]) -> StructureView:
    """A :class:`StructureView` of a stored run's events."""
    view = StructureView()
    for event in events:
        view.apply(event)
    return view


def kept_counts(kept: dict[int, str]) -> list[tuple[int, int, int]]:
    """``(layer, kept, total)`` per layer, in layer order.

    >>> kept_counts({1: "110", 0: "111"})
    [(0, 3, 3), (1, 2, 3)]
    """
    return [(layer, kept[layer].count("1"), len(kept[layer])) for layer in sorted(kept)]
