"""The Lesson: four pruning methods at 50% on one model, run once (or taken from the run store) and set side by side.

:func:`lesson_configs` builds one :class:`~toolkit.api.RunConfig` per method of :data:`METHODS` under
the quick protocol (8 × 128 calibration tokens, 16 evaluation windows of 128 tokens, dense
perplexity and greedy generations). :func:`plan_lesson` looks each one up in the store, matched by
model + method + sparsity + protocol (:meth:`RunConfig.reuse_key`), and estimates the time the
missing ones will take (:func:`estimate_seconds`); :func:`run_lesson` runs only those.
:func:`toolkit.teach.lesson_view.lesson_material` then reads the four runs back for the figures.

It goes through :mod:`toolkit.api` only, as the app does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from toolkit.api import CancelToken, RunConfig, find_finished, list_runs
from toolkit.events import Event
from toolkit.spec.targets import Unstructured
from toolkit.store.runs import RunRecord
from toolkit.sweep import SweepPoint, run_sweep
from toolkit.teach.lesson_view import LABELS

METHODS = ("magnitude", "wanda", "sparsegpt", "fista")
SPARSITY = 0.5
# Wall seconds of one quick-protocol run of the embedded model on 1 CPU thread (load, calibration, pruning,
# dense and pruned perplexity, generations), measured once with `python -m toolkit prune ... --threads 1` on a
# 2-core machine shared with other jobs (magnitude 106 s, Wanda 496 s, SparseGPT 355 s, FISTAPruner 2468 s);
# used when the store holds no run of the method.
STATED_SECONDS = {"magnitude": 110.0, "wanda": 500.0, "sparsegpt": 360.0, "fista": 2470.0}
OVERHEAD_SECONDS = 80.0  # the part of the magnitude run that was not pruning (load, evaluation, generations)
UNKNOWN_SECONDS = 300.0  # a method outside STATED_SECONDS with no stored run


def lesson_configs(model: str, runs_dir: str, methods: Sequence[str] = METHODS) -> list[RunConfig]:
    """One config per method: 50% unstructured, quick protocol, dense perplexity and generations, in ``runs_dir``."""
    return [RunConfig(model=model, method=method, sparsity=Unstructured(SPARSITY), calib="wiki", nsamples=8,
                      seqlen=128, eval_data="wiki", eval_seqlen=128, eval_windows=16, eval_dense=True, generate=True,
                      out_dir=runs_dir)
            for method in methods]


@dataclass(frozen=True)
class LessonPlan:
    """What the lesson will do: the configs, the stored run of each (None: to run), the seconds it will take."""

    configs: tuple[RunConfig, ...]
    stored: dict[str, RunRecord | None]
    seconds: dict[str, float] = field(default_factory=dict)  # estimated seconds of each run still to make

    @property
    def to_run(self) -> list[RunConfig]:
        """The configs with no matching finished run in the store."""
        return [c for c in self.configs if self.stored.get(c.method) is None]

    @property
    def total_seconds(self) -> float:
        """Estimated seconds of all the runs still to make (0 when every run is stored)."""
        return sum(self.seconds.values())


def estimate_seconds(config: RunConfig, records: Sequence[RunRecord]) -> float:
    """Wall seconds ``config`` will take: from the store when it can, else :data:`STATED_SECONDS`.

    A finished run of the same model and method under any protocol gives its pruning time
    (``prune_seconds``) scaled by the calibration tokens (nsamples × seqlen), plus
    :data:`OVERHEAD_SECONDS` for loading, evaluation and generation.
    """
    tokens = config.nsamples * config.seqlen
    for record in records:
        cfg, result = record.config, record.result
        if record.status != "finished" or not isinstance(result, dict):
            continue
        if cfg.get("model") != config.model or cfg.get("method") != config.method:
            continue
        seconds = result.get("prune_seconds")
        stored_tokens = (cfg.get("nsamples") or 0) * (cfg.get("seqlen") or 0)
        if isinstance(seconds, int | float) and math.isfinite(seconds) and stored_tokens > 0:
            return float(seconds) * tokens / stored_tokens + OVERHEAD_SECONDS
    return STATED_SECONDS.get(config.method, UNKNOWN_SECONDS)


def plan_lesson(model: str, runs_dir: str, methods: Sequence[str] = METHODS) -> LessonPlan:
    """Look every lesson run up in ``runs_dir`` and estimate the missing ones (raises ToolkitError for bad input)."""
    configs = tuple(lesson_configs(model, runs_dir, methods))
    stored = {c.method: find_finished(runs_dir, c.reuse_key()) for c in configs}
    records = list_runs(runs_dir)
    seconds = {c.method: estimate_seconds(c, records) for c in configs if stored[c.method] is None}
    return LessonPlan(configs, stored, seconds)


def format_duration(seconds: float) -> str:
    """``45 s``, ``3 min``, ``1 h 10 min`` (rounded; estimates need no more)."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def plan_text(plan: LessonPlan) -> str:
    """Markdown saying which runs are reused and how long the others will take, before anything runs."""
    reused = [c.method for c in plan.configs if plan.stored.get(c.method) is not None]
    lines = [f"**Lesson**: {', '.join(LABELS.get(c.method, c.method) for c in plan.configs)} at "
             f"{SPARSITY:.0%} on `{plan.configs[0].model}`, quick protocol (8 × 128 calibration tokens, "
             "16 evaluation windows of 128 tokens)."]
    if reused:
        listed = ", ".join(f"{LABELS.get(m, m)} (`{run.run_id}`)" for m in reused if (run := plan.stored[m]))
        lines.append(f"Reused from the run store: {listed}.")
    if plan.to_run:
        each = ", ".join(f"{LABELS.get(c.method, c.method)} ≈ {format_duration(plan.seconds[c.method])}"
                         for c in plan.to_run)
        lines.append(f"To run: {each}; about **{format_duration(plan.total_seconds)}** in all, then a few seconds "
                     "to draw.")
    else:
        lines.append("Every run is in the store: drawing takes a few seconds.")
    return "\n\n".join(lines)


def run_lesson(plan: LessonPlan, cancel: CancelToken | None = None) -> Iterator[Event | SweepPoint]:
    """Run the missing lesson runs in order, yielding their events and a SweepPoint as each ends.

    Reused runs yield nothing here. A run that fails gives a point with status "failed" and the lesson
    goes on; cancelling ends it (runs already finished stay in the store and are reused next time).
    """
    return run_sweep(plan.to_run, cancel)
