"""Where a run's time goes: seconds per phase per decoder layer (docs/scale.md "Phases").

Phases (:data:`PHASES`):

- ``capture``: the model's own forward up to the first decoder layer, once per run (layer -1);
- ``plan``: the allocation's dense scoring pass over every layer, once per run (layer -1; OWL only);
- ``copies``: a layer moved to the device in its compute dtype and back to the host in its storage dtype;
- ``statistics``: the passes that feed the Gram matrices and column norms, accumulation included;
- ``solve``: the methods' solves (the time inside ``MethodSpec.fn``);
- ``refine``: the mask refinement after a solve (DSnoT) and its before/after errors;
- ``writeback``: results written into the layer, the journal's backups included;
- ``propagation``: the pass of the compressed layer that gives the next layer its inputs;
- ``error``: dense reference passes run only for the output error, and the error itself.

Sections nest (a solve inside the fused statistics pass is charged to ``solve``, not to
``statistics``): entering a section pauses the one it is in. On a CUDA device every boundary
synchronises, so a phase is charged the kernels it launched.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

PHASES = ("capture", "plan", "copies", "statistics", "solve", "refine", "writeback", "propagation", "error")


@dataclass
class PhaseTimer:
    """Seconds per phase of the current layer; :meth:`layer_done` hands them over and starts the next layer."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    current: dict[str, float] = field(default_factory=dict)
    _stack: list[list] = field(default_factory=list)  # [phase, started at]

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    @contextlib.contextmanager
    def section(self, phase: str) -> Iterator[None]:
        """Charge the time inside to ``phase`` (the enclosing section is paused meanwhile)."""
        assert phase in PHASES, phase
        now = self._now()
        if self._stack:
            outer = self._stack[-1]
            self._charge(outer[0], now - outer[1])
        self._stack.append([phase, now])
        try:
            yield
        finally:
            now = self._now()
            name, started = self._stack.pop()
            self._charge(name, now - started)
            if self._stack:
                self._stack[-1][1] = now

    def _charge(self, phase: str, seconds: float) -> None:
        self.current[phase] = self.current.get(phase, 0.0) + seconds

    def layer_done(self, layer: int) -> dict[str, float]:
        """The phases of ``layer`` as a record ``{"layer": i, phase: seconds, ...}``; the counters restart."""
        record = {"layer": layer, **{p: round(self.current.get(p, 0.0), 6) for p in PHASES if p in self.current}}
        self.current = {}
        return record


def phase_totals(records: list[dict[str, float]]) -> dict[str, float]:
    """Seconds per phase summed over the per-layer records (phases that never ran are left out)."""
    totals: dict[str, float] = {}
    for record in records:
        for phase in PHASES:
            if phase in record:
                totals[phase] = totals.get(phase, 0.0) + record[phase]
    return {phase: round(seconds, 6) for phase, seconds in totals.items()}
