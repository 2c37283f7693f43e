"""Zero-shot accuracy and greedy generations inside a run, dense and pruned (behind :mod:`toolkit.run.pipeline`).

A run asked for tasks scores the dense model before pruning and the pruned model after it, with
the same tasks, data, limit and harness; the dense scores are cached per task by content (the
model's weights stamp and config hash, task, data source, split, limit, tokenizer, context and
harness version), as the dense perplexity is. A run asked for generations makes greedy
continuations of :data:`~toolkit.evaluation.generate.DEFAULT_PROMPTS` from both models.

Progress reaches every UI as :class:`~toolkit.events.EvalProgress` events (perplexity windows,
scored requests of a task, prompts), at most one per percent of each stage: they are live-only,
the run store keeps the results (EvalPoint, TaskScore, Generated), not the ticks.

The result's ``zero_shot`` entry::

    {"dense": {task: value}, "pruned": {task: value}, "mean": {"dense": m, "pruned": m},
     "limit": N, "tasks": {task: {metric, split, source, examples, note}}, "dense_cached": [task, ...],
     "shots": 0, "protocol": {...}, "details": {"dense": ..., "pruned": ...}, "error": "..." (when it failed)}

where ``value`` is the task's headline metric (acc or acc_norm) and ``m`` its mean over tasks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from toolkit.errors import RunCancelled
from toolkit.evaluation.generate import DEFAULT_PROMPTS, Generation, generate, side_by_side
from toolkit.evaluation.tasks import TaskSpec
from toolkit.evaluation.zeroshot import TaskResult, ZeroShotResult, evaluate_tasks, protocol
from toolkit.events import EvalProgress, Event, Generated
from toolkit.models.load import LoadedModel
from toolkit.run.provenance import cached_value, model_key, store_value

Progress = Callable[[str, int, int], None]
GENERATION_TOKENS = 32  # new tokens per prompt of a run's generations (RunConfig.generate_tokens's default)
CACHE = "dense_zero_shot"


class ProgressEvents:
    """``(done, total)`` callbacks that emit :class:`EvalProgress`, at most one per percent per stage.

    Each callback also feeds the plain ``progress(stage, done, total)`` adapter (the CLI's bars)
    and raises :class:`RunCancelled` once ``cancelled()`` turns true.
    """

    def __init__(self, emit: Callable[[Event], None], progress: Progress, cancelled: Callable[[], bool]) -> None:
        self._emit, self._progress = emit, progress
        self.cancelled = cancelled  # the run's cancel check, shared with the engine and the perplexity loop
        self._shown: dict[tuple[str, str], int] = {}

    def callback(self, phase: str, what: str) -> Callable[[int, int], None]:
        """The callback of one stage: ``phase`` dense|pruned, ``what`` perplexity, a task or generation."""
        def report(done: int, total: int) -> None:
            if self.cancelled():
                raise RunCancelled("cancelled")
            percent = 100 * done // max(total, 1)
            if done >= total or percent > self._shown.get((phase, what), -1):
                self._shown[(phase, what)] = percent
                self._emit(EvalProgress(phase=phase, what=what, done=done, total=total))
            self._progress(f"{what} {phase}" if what != "perplexity" else f"eval {phase}", done, total)

        return report


def zero_shot_key(loaded: LoadedModel, spec: TaskSpec, scoring: dict[str, Any]) -> dict[str, Any]:
    """Cache key of a dense task score: the model's content, the task's data and the scoring protocol."""
    kept = {k: scoring[k] for k in ("harness", "shots", "limit", "tokenizer", "max_context", "scorer")}
    return {**model_key(loaded), "task": spec.name, "source": spec.source, "split": spec.split, **kept}


def score_tasks(
    loaded: LoadedModel, specs: Sequence[TaskSpec], limit: int | None, device: torch.device,
    progress: ProgressEvents, phase: str,
) -> tuple[ZeroShotResult, list[str]]:
    """Score ``specs`` on the model as it is now; with ``phase`` "dense", reuse and fill the cache.

    Returns the result and the tasks taken from the cache.
    """
    scoring = protocol(loaded.model, loaded.codec, device, limit)
    results, cached = [], []
    for spec in specs:
        key = zero_shot_key(loaded, spec, scoring)
        stored = cached_value(CACHE, key) if phase == "dense" else None
        if isinstance(stored, dict):
            results.append(TaskResult(**stored))
            cached.append(spec.name)
            continue
        report = progress.callback(phase, spec.name)
        scored = evaluate_tasks(loaded.model, loaded.codec, [spec], limit, device,
                                lambda task, done, total, report=report: report(done, total)).tasks[0]
        if phase == "dense":
            store_value(CACHE, key, dataclasses.asdict(scored))
        results.append(scored)
    return ZeroShotResult(tuple(results), limit, scoring), cached


def generate_texts(loaded: LoadedModel, device: torch.device, progress: ProgressEvents, phase: str,
                   emit: Callable[[Event], None], tokens: int = GENERATION_TOKENS) -> list[Generation]:
    """Greedy continuations of the fixed prompts (``tokens`` new tokens each), one :class:`Generated` event each."""
    texts: list[Generation] = []
    report = progress.callback(phase, "generation")
    report(0, len(DEFAULT_PROMPTS))
    for prompt in DEFAULT_PROMPTS:
        text = generate(loaded.model, loaded.codec, [prompt], tokens, device)[0]
        emit(Generated(which=phase, prompt=text.prompt, text=text.text, new_tokens=text.new_tokens,
                       seconds=text.seconds))
        texts.append(text)
        report(len(texts), len(DEFAULT_PROMPTS))
    return texts


@dataclass
class DenseEvals:
    """What the dense model gave before pruning (None / empty when not asked)."""

    zero_shot: ZeroShotResult | None = None
    cached: tuple[str, ...] = ()
    texts: tuple[Generation, ...] = ()


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def zero_shot_entry(dense: DenseEvals, pruned: ZeroShotResult | None, error: str = "") -> dict[str, Any]:
    """The result's ``zero_shot`` entry (see the module docstring) from the dense and pruned scores."""
    assert dense.zero_shot is not None
    entry: dict[str, Any] = {
        "dense": {t.task: t.value for t in dense.zero_shot.tasks},
        "pruned": {t.task: t.value for t in pruned.tasks} if pruned is not None else {},
        "mean": {"dense": _finite(dense.zero_shot.mean), "pruned": _finite(pruned.mean) if pruned else None},
        "limit": dense.zero_shot.limit,
        "tasks": {t.task: {"metric": t.metric, "split": t.split, "source": t.source, "examples": t.examples,
                           "note": t.note} for t in dense.zero_shot.tasks},
        "dense_cached": list(dense.cached),
        "shots": dense.zero_shot.protocol.get("shots", 0),
        "protocol": dense.zero_shot.protocol,
        "details": {"dense": dense.zero_shot.to_dict(), "pruned": pruned.to_dict() if pruned else None},
    }
    if error:
        entry["error"] = error
    return entry


def generations_entry(dense: Sequence[Generation], pruned: Sequence[Generation], error: str = "",
                      tokens: int = GENERATION_TOKENS) -> dict[str, Any]:
    """The result's ``generations`` entry: side-by-side records (dense only when the pruned texts failed)."""
    records = side_by_side(dense, pruned) if len(pruned) == len(dense) else \
        [{"prompt": d.prompt, "dense": d.text, "dense_tokens_per_s": d.tokens_per_s} for d in dense]
    entry: dict[str, Any] = {"max_new_tokens": tokens, "decoding": "greedy", "records": records}
    if error:
        entry["error"] = error
    return entry
