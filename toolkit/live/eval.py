"""The evaluation part of a live run view: progress of the stage under way, zero-shot scores, texts.

Torch-free, like :mod:`toolkit.live.view` (which holds one :class:`EvalView` per run). It folds
:class:`~toolkit.events.EvalProgress` (perplexity windows, scored requests of a task, prompts),
:class:`~toolkit.events.TaskScore` and :class:`~toolkit.events.Generated`; a UI reads
:meth:`EvalView.stage_line` for its status line, :meth:`EvalView.accuracy_rows` for the table
dense vs pruned and :attr:`EvalView.texts` for the generation panel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from toolkit.events import EvalProgress, Generated, TaskScore


@dataclass(frozen=True)
class AccuracyRow:
    """One task's headline metric, dense and pruned (nan = not measured)."""

    task: str
    metric: str
    split: str
    examples: int
    dense: float
    pruned: float


@dataclass
class EvalView:
    """Evaluation progress and results of one run, folded from its events."""

    stage: EvalProgress | None = None  # the stage under way; None while pruning or before any evaluation
    stage_started_at: float = math.nan  # consumer clock at the stage's first tick
    stage_first_done: int = 0  # ``done`` of that first tick (the pace counts from it)
    scores: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # which → task → metric → value
    headline: dict[str, str] = field(default_factory=dict)  # task → its headline metric
    labels: dict[str, tuple[str, int]] = field(default_factory=dict)  # task → (split, examples)
    texts: dict[str, list[Generated]] = field(default_factory=dict)  # which → greedy texts, in prompt order
    durations: dict[tuple[str, str], float] = field(default_factory=dict)  # (phase, what) → seconds, once complete

    def progress(self, event: EvalProgress, now: float) -> None:
        """A tick: a new stage restarts the pace clock; a complete stage records its duration."""
        if self.stage is None or (self.stage.phase, self.stage.what) != (event.phase, event.what):
            self.stage_started_at, self.stage_first_done = now, event.done
        self.stage = event
        if event.done >= event.total and math.isfinite(now) and math.isfinite(self.stage_started_at):
            self.durations.setdefault((event.phase, event.what), now - self.stage_started_at)

    def score(self, event: TaskScore) -> None:
        """A task's metric for the dense or the pruned model."""
        self.scores.setdefault(event.which, {}).setdefault(event.task, {})[event.metric] = float(event.value)
        if event.headline:
            self.headline[event.task] = event.metric
        self.labels[event.task] = (event.split, int(event.examples))

    def text(self, event: Generated) -> None:
        """A greedy continuation of the dense or the pruned model."""
        self.texts.setdefault(event.which, []).append(event)

    @property
    def fraction(self) -> float:
        """Done / total of the stage under way (0 without one)."""
        if self.stage is None or self.stage.total <= 0:
            return 0.0
        return min(1.0, self.stage.done / self.stage.total)

    def eta(self, now: float) -> float:
        """Seconds left in the stage under way at its pace so far; nan before a second tick."""
        stage = self.stage
        if stage is None or not math.isfinite(self.stage_started_at) or stage.done <= self.stage_first_done:
            return math.nan
        rate = (stage.done - self.stage_first_done) / max(now - self.stage_started_at, 1e-9)
        return (stage.total - stage.done) / rate

    def stage_line(self) -> str:
        """``evaluating pruned · window 40/210``, ``zero-shot boolq (dense) · 30/100 requests`` or ""."""
        stage = self.stage
        if stage is None:
            return ""
        if stage.what == "perplexity":
            return f"evaluating {stage.phase} · window {stage.done}/{stage.total}"
        if stage.what == "generation":
            return f"generating {stage.phase} · prompt {stage.done}/{stage.total}"
        if stage.what == "speed":  # toolkit/run/bought.py: prefill and decode at batch 1 and 8
            return f"measuring the {stage.phase} model's decode speed (tokens/s)"
        return f"zero-shot {stage.what} ({stage.phase}) · {stage.done}/{stage.total} requests"

    def accuracy_rows(self) -> list[AccuracyRow]:
        """One row per task scored (dense order first), headline metric dense and pruned."""
        tasks = list(dict.fromkeys([*self.scores.get("dense", {}), *self.scores.get("pruned", {})]))
        rows = []
        for task in tasks:
            metric = self.headline.get(task, "acc")
            split, examples = self.labels.get(task, ("", 0))
            rows.append(AccuracyRow(task, metric, split, examples,
                                    self.scores.get("dense", {}).get(task, {}).get(metric, math.nan),
                                    self.scores.get("pruned", {}).get(task, {}).get(metric, math.nan)))
        return rows

    def mean(self, which: str) -> float:
        """Mean headline metric of ``which`` over its tasks (nan when a task or all are missing)."""
        values = [row.dense if which == "dense" else row.pruned for row in self.accuracy_rows()]
        return sum(values) / len(values) if values else math.nan
