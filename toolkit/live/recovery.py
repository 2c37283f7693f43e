"""A recovery run's events folded into plain state: the loss curve, the perplexities, the status (no torch).

A recovery (:mod:`toolkit.run.recover`) emits ``RunStarted`` (method ``recover``, the settings in
``options``), ``EvalPoint`` "pruned" (before), one ``RecoveryStep`` per step, ``EvalPoint``
"recovered" (after), then ``RunFinished`` or ``RunFailed``. :class:`RecoveryView` keeps what the app
and the widgets draw: the loss per step (:func:`toolkit.figures.recovery.loss_figure`) and the
perplexity before and after. Folded with a clock (``now``: a live consumer's, or the run store's
stamps in a replay) it also keeps when the run started and ended, for its elapsed time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolkit.events import EvalPoint, Event, RecoveryStep, RunFailed, RunFinished, RunStarted, RunWarning


@dataclass
class RecoveryView:
    """Everything a recovery panel draws, as plain data; ``revision`` counts the folded events."""

    status: str = "idle"  # idle | running | finished | failed | cancelled
    run_id: str = ""
    parent: str = ""
    label: str = ""  # the parent's compression label (``50%``)
    model: str = ""  # the model's label: ``smollm2-135m after wanda 50% (run …)``
    protocol: dict[str, Any] = field(default_factory=dict)  # parent, calibration (its training data), evaluation
    steps: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    step_numbers: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)
    ppl_before: dict[str, float] = field(default_factory=dict)
    ppl_after: dict[str, float] = field(default_factory=dict)
    train_seconds: float = math.nan
    warnings: list[str] = field(default_factory=list)
    error: str = ""
    revision: int = 0
    started_at: float = math.nan  # the clock at RunStarted
    ended_at: float = math.nan  # the clock at RunFinished / RunFailed
    bought: dict[str, Any] | None = None  # RunFinished's ``bought``: what the recovered model costs

    def apply(self, event: Event, now: float = math.nan) -> RecoveryView:
        """Fold one event into the view (in place) at clock ``now`` (seconds); events of other kinds only count."""
        self.revision += 1
        if isinstance(event, RunStarted):
            self.status, self.run_id, self.label = "running", event.run_id, event.sparsity
            self.started_at, self.ended_at = now, math.nan
            self.protocol = dict(event.protocol)
            self.model = str(self.protocol.get("model_label", event.model))
            self.options = dict(event.options)
            self.parent = str(self.options.get("parent", ""))
            self.steps = int(self.options.get("steps", 0) or 0)
        elif isinstance(event, RecoveryStep):
            self.step_numbers.append(int(event.step))
            self.losses.append(_num(event.loss))
            self.lrs.append(_num(event.lr))
        elif isinstance(event, EvalPoint):
            target = self.ppl_after if event.which == "recovered" else self.ppl_before
            target[event.dataset] = _num(event.ppl)
        elif isinstance(event, RunFinished):
            self.status, self.train_seconds, self.ended_at = "finished", _num(event.prune_seconds), now
            self.bought = dict(event.bought) if isinstance(event.bought, dict) else None
        elif isinstance(event, RunFailed):
            self.status, self.error = ("cancelled" if event.cancelled else "failed"), event.error
            self.ended_at = now
        elif isinstance(event, RunWarning):
            self.warnings.append(event.message)
        return self

    def elapsed(self, now: float) -> float:
        """Seconds since RunStarted (frozen at the end); nan when the view was folded without a clock."""
        end = self.ended_at if math.isfinite(self.ended_at) else now
        return end - self.started_at

    @property
    def calibration(self) -> dict[str, Any]:
        """The training data: ``nsamples`` windows of ``seqlen`` tokens of ``source`` (seed), {} when unknown."""
        found = self.protocol.get("calibration")
        return dict(found) if isinstance(found, dict) else {}

    @property
    def step(self) -> int:
        """The last step done (0 before the first)."""
        return self.step_numbers[-1] if self.step_numbers else 0

    @property
    def dataset(self) -> str:
        """The evaluation dataset ("" when the parent evaluated nothing)."""
        return next(iter({**self.ppl_before, **self.ppl_after}), "")

    def status_line(self) -> str:
        """One line: status, step i of n with the last loss, or how it ended."""
        if self.status == "idle":
            return "Pick a finished run with a saved model, then Recover."
        if self.status in ("failed", "cancelled"):
            return f"{self.status}: {self.error}"
        loss = f" · loss {self.losses[-1]:.4f}" if self.losses else ""
        where = "evaluating before" if not self.step_numbers and self.status == "running" else \
            f"step {self.step} of {self.steps}{loss}"
        if self.status == "running" and self.step >= self.steps > 0:
            where += " · merging, saving and evaluating after"
        return f"{self.status} · recover run {self.parent} ({self.label}) · {where}"

    def result_rows(self) -> list[tuple[str, float, float]]:
        """(dataset, perplexity before, after) per dataset measured; nan where not (yet) measured."""
        names = dict.fromkeys([*self.ppl_before, *self.ppl_after])
        return [(name, self.ppl_before.get(name, math.nan), self.ppl_after.get(name, math.nan)) for name in names]


def fold_recovery(events: Iterable[Event], view: RecoveryView | None = None,
                  times: Sequence[float] = ()) -> RecoveryView:
    """Replay ``events`` (a live stream or a stored recovery run's events.jsonl) into a view.

    ``times`` (seconds, one per event: the run store's stamps) are the clock each is folded at.
    """
    view = view or RecoveryView()
    for number, event in enumerate(events):
        view.apply(event, times[number] if number < len(times) else math.nan)
    return view


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
