"""The :class:`Event` base class and the events of evaluation and recovery (CONTRIBUTING.md R6).

Split from :mod:`toolkit.events` for its size; that module re-exports everything here, so
``from toolkit.events import Event, EvalProgress`` stays the one import path, and its
:data:`~toolkit.events.EVENT_TYPES` reads these kinds back from ``events.jsonl``. Torch-free, plain data.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class Event:
    """Base class: every event serialises to a flat dict with a ``type`` key."""

    kind: ClassVar[str] = "Event"

    def to_dict(self) -> dict[str, Any]:
        """Plain-data dict with ``type``; non-finite floats become None (valid JSON)."""
        data: dict[str, Any] = {"type": self.kind}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            data[f.name] = None if isinstance(value, float) and not math.isfinite(value) else value
        return data


# ---- Evaluation as events (zero-shot accuracy, evaluation progress, generations) ----------------


@dataclass(frozen=True, slots=True)
class EvalProgress(Event):
    """Evaluation advanced: ``phase`` is "dense" or "pruned", ``what`` is "perplexity" or a task name.

    ``done``/``total`` count windows for perplexity and scored requests (one per answer choice)
    for a zero-shot task.
    """

    kind: ClassVar[str] = "EvalProgress"
    phase: str
    what: str
    done: int
    total: int


@dataclass(frozen=True, slots=True)
class TaskScore(Event):
    """A zero-shot score: ``which`` is "dense" or "pruned", ``metric`` "acc" or "acc_norm" (0 shots)."""

    kind: ClassVar[str] = "TaskScore"
    which: str
    task: str
    metric: str
    value: float
    examples: int
    split: str
    headline: bool = False  # the metric that enters the mean over tasks


@dataclass(frozen=True, slots=True)
class Generated(Event):
    """A greedy continuation of ``prompt``: ``which`` is "dense" or "pruned" (:mod:`toolkit.evaluation.generate`)."""

    kind: ClassVar[str] = "Generated"
    which: str
    prompt: str
    text: str
    new_tokens: int
    seconds: float


@dataclass(frozen=True, slots=True)
class RecoveryStep(Event):
    """One step of a recovery fine-tune (toolkit.run.recover): causal-LM ``loss`` (mean token NLL), learning rate."""

    kind: ClassVar[str] = "RecoveryStep"
    step: int  # 1-based; the run's RunStarted.options["steps"] is the total
    loss: float
    lr: float
