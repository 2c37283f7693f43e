"""Zero-shot accuracy of an in-memory model through lm-evaluation-harness.

:func:`evaluate_tasks` scores the model the caller holds (dense or pruned, never re-loaded) on
tasks named in :mod:`toolkit.evaluation.tasks`, one task after the other so each gets its own
time and progress. Every number is labelled: task, split, metric (``acc`` / ``acc_norm``),
shots (always 0), examples scored, and the data source (local validation copy or the hub).
The mean is over tasks of each task's headline metric (:data:`~toolkit.evaluation.tasks.KNOWN_TASKS`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from toolkit.errors import ToolkitError
from toolkit.evaluation.generate import context_limit
from toolkit.evaluation.tasks import LOCAL, TaskSpec, check_limit, local_config, resolve_tasks, stock_folder
from toolkit.events import TaskScore
from toolkit.models.load import BOS_FAMILIES
from toolkit.models.tokenizers import TextCodec

log = logging.getLogger(__name__)
SHOTS = 0
METRICS = ("acc", "acc_norm")
BOOTSTRAP_ITERS = 1000  # acc/acc_norm stderr is closed-form; this only bounds other metrics' bootstrap


@dataclass(frozen=True)
class TaskResult:
    """One task's scores; ``value`` is the headline ``metric``, ``metrics`` holds all (with stderr)."""

    task: str
    split: str
    source: str
    metric: str
    value: float
    metrics: dict[str, float]
    examples: int
    seconds: float
    shots: int = SHOTS
    note: str = ""
    truncated: int = 0  # requests cut from the left to fit the model's context


@dataclass(frozen=True)
class ZeroShotResult:
    """Every task's result, the mean of the headline metrics and how they were measured."""

    tasks: tuple[TaskResult, ...]
    limit: int | None
    protocol: dict[str, Any] = field(default_factory=dict)

    @property
    def mean(self) -> float:
        """Mean over tasks of the headline metric (nan when there is no task)."""
        return sum(t.value for t in self.tasks) / len(self.tasks) if self.tasks else math.nan

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the ``zero_shot`` entry of a result); nan becomes None."""
        return {"tasks": {t.task: _finite(asdict(t)) for t in self.tasks},
                "mean": None if math.isnan(self.mean) else self.mean,
                "mean_of": {t.task: t.metric for t in self.tasks},
                "shots": SHOTS, "limit": self.limit, "protocol": self.protocol}

    def scores(self, which: str) -> list[TaskScore]:
        """One :class:`~toolkit.events.TaskScore` event per task and metric; ``which`` is dense|pruned."""
        return [TaskScore(which=which, task=t.task, metric=name, value=value, examples=t.examples, split=t.split,
                          headline=name == t.metric)
                for t in self.tasks for name, value in t.metrics.items() if name in METRICS]


def _finite(data: dict[str, Any]) -> dict[str, Any]:
    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return {k: clean(v) for k, v in value.items()} if isinstance(value, dict) else value

    return {k: clean(v) for k, v in data.items()}


def evaluate_tasks(
    model: nn.Module, codec: TextCodec, tasks: Sequence[str] | Sequence[TaskSpec] | str,
    limit: int | None = None, device: torch.device | str = "cpu",
    progress: Callable[[str, int, int], None] | None = None,
) -> ZeroShotResult:
    """Zero-shot accuracy of ``model`` on ``tasks`` (names, "boolq,rte", or :func:`resolve_tasks` specs).

    ``limit`` scores the first N examples of each task. ``progress(task, done, total)`` is called
    as the task's loglikelihood requests (one per answer choice) are scored; it may raise (e.g.
    :class:`~toolkit.errors.RunCancelled`) to stop. The model moves to ``device`` for the
    duration and back, in eval mode, unchanged. Raises :class:`ToolkitError` for unknown tasks,
    missing offline data or ``limit`` < 1, before any scoring.
    """
    specs = _specs(tasks)
    check_limit(limit)
    check_task_tokens(model, codec, specs)
    from toolkit.evaluation.harness import CodecLM

    report = progress or (lambda task, done, total: None)
    home, was_training = next(model.parameters()).device, model.training
    model.to(torch.device(device)).eval()
    results = []
    try:
        with _quiet_datasets():
            for spec in specs:
                lm = CodecLM(model, codec, progress=lambda done, total, name=spec.name: report(name, done, total))
                results.append(_run_task(lm, spec, limit))
    finally:
        model.to(home).train(was_training)
    return ZeroShotResult(tuple(results), limit, protocol(model, codec, device, limit))


def check_task_tokens(model: nn.Module, codec: TextCodec, specs: Sequence[TaskSpec]) -> None:
    """Refuse, before any scoring, a model whose family needs a BOS token (Gemma) with a tokenizer that has none.

    Such a model was trained with BOS at the start of every input; scored without it, its
    log-likelihoods (and so its accuracies) are those of inputs it never saw.
    """
    family = getattr(getattr(model, "config", None), "model_type", "")
    if family in BOS_FAMILIES and codec.bos_id is None:
        names = ", ".join(spec.name for spec in specs)
        raise ToolkitError(f"{family} models need a BOS token at the start of every input, but the tokenizer "
                           f"{codec.name!r} has none, so {names} would be scored on inputs the model never saw: "
                           "load the model with its own tokenizer (tokenizer.json with bos_token)")


def _specs(tasks: Sequence[str] | Sequence[TaskSpec] | str) -> tuple[TaskSpec, ...]:
    if not isinstance(tasks, str) and tasks and all(isinstance(t, TaskSpec) for t in tasks):
        return tuple(t for t in tasks if isinstance(t, TaskSpec))
    return resolve_tasks([t.name if isinstance(t, TaskSpec) else t for t in tasks] if not isinstance(tasks, str)
                         else tasks)


def _run_task(lm: Any, spec: TaskSpec, limit: int | None) -> TaskResult:
    from lm_eval.evaluator import evaluate

    start = time.perf_counter()
    task = build_task(spec)
    out: dict[str, Any] | None = evaluate(lm=lm, task_dict={spec.name: task}, limit=limit,  # type: ignore[assignment]
                                          bootstrap_iters=BOOTSTRAP_ITERS, log_samples=False)
    if out is None:
        raise RuntimeError(f"lm-eval returned no results for {spec.name}")
    raw = out["results"][spec.name]
    metrics = {}
    for name in METRICS:
        if f"{name},none" in raw:
            metrics[name] = float(raw[f"{name},none"])
            stderr = raw.get(f"{name}_stderr,none")
            metrics[f"{name}_stderr"] = float(stderr) if isinstance(stderr, (int, float)) else math.nan
    metric = spec.headline if spec.headline in metrics else "acc"
    split = "test" if task.has_test_docs() else "validation"
    examples = int(out["n-samples"][spec.name]["effective"])
    return TaskResult(task=spec.name, split=split, source=spec.source, metric=metric, value=metrics[metric],
                      metrics=metrics, examples=examples, seconds=time.perf_counter() - start, note=spec.note,
                      truncated=lm.truncated)


def build_task(spec: TaskSpec) -> Any:
    """The lm-eval task object of ``spec``: our local config, or the stock task from the hub; 0 shots."""
    if spec.source == LOCAL:
        from toolkit.evaluation.harness import LocalTask

        task = LocalTask(config=local_config(spec.name))
    else:
        from lm_eval.tasks import TaskManager

        manager = TaskManager(include_defaults=False, include_path=str(stock_folder(spec.name)))
        task = manager.load_task_or_group([spec.name])[spec.name]
    task.set_config(key="num_fewshot", value=SHOTS)
    return task


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """Hide ``datasets``' per-map progress bars while tasks are built (restored afterwards)."""
    import datasets

    was_disabled = datasets.is_progress_bar_enabled() is False
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()


def protocol(model: nn.Module, codec: TextCodec, device: torch.device | str, limit: int | None) -> dict[str, Any]:
    """How the scores were measured: harness and version, shots, limit, device, tokenizer, context."""
    from importlib.metadata import version

    return {"max_context": context_limit(model), "harness": f"lm-eval {version('lm_eval')}", "shots": SHOTS,
            "limit": limit, "device": str(device), "tokenizer": codec.name,
            "scorer": "toolkit.evaluation.harness.CodecLM (HFLM's loglikelihood protocol)",
            "chat_template": False}
