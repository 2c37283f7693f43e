"""``python -m toolkit eval``: the perplexity and the zero-shot tasks of one model, only what was asked.

Without ``--tasks`` it scores the perplexity (``--data``, default wiki). With ``--tasks`` it scores
the tasks, and the perplexity only when ``--data`` is given too (one line says it was skipped);
``--data none`` skips it. A flag of a stage that does not run is refused with one line (``--seqlen``,
``--windows`` or ``--encoding`` when no perplexity is scored, ``--limit`` or ``--task-data`` without
``--tasks``), never silently ignored. Every stage draws a bar: one over the perplexity windows (opened before
the first window), one per task. ``--json`` writes ``model``, ``ppl`` (empty when skipped),
``protocol`` (the perplexity's; only the model's name and label when skipped) and ``zero_shot``.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from toolkit.cli.protocol import parse_windows
from toolkit.cli.prune_flags import applies
from toolkit.errors import ToolkitError
from toolkit.evaluation.tasks import AUTO

SKIPPED = "perplexity skipped: give --data wiki to score it too"
SEQLEN = 512  # tokens per perplexity window when --seqlen is not given
PERPLEXITY_FLAGS = (("seqlen", "--seqlen"), ("windows", "--windows"), ("encoding", "--encoding"))


def perplexity_data(data: str | None, with_tasks: bool) -> str | None:
    """The text to score the perplexity on, or None: not given with --tasks, or ``none``; nothing at all is an error."""
    if data is not None and data.strip().lower() == "none":
        data = None
    elif data is None and not with_tasks:
        data = "wiki"
    if data is None and not with_tasks:
        raise ToolkitError("--data none leaves nothing to evaluate: give --tasks, or a --data text")
    return data


def check_applicable(args: argparse.Namespace, data: str | None) -> None:
    """Refuse a flag that would change nothing: a perplexity flag without a perplexity, a task flag without tasks.

    ``args`` holds None for a flag not given (the parser's defaults for eval); ``data`` is the text the
    perplexity is scored on (None: no perplexity).
    """
    if data is None:
        given = [flag for name, flag in PERPLEXITY_FLAGS if getattr(args, name, None) is not None]
        if given:
            why = "--data none skips the perplexity" if args.data is not None else \
                "with --tasks the perplexity is scored only when --data is given"
            raise ToolkitError(f"{applies(given)} to the perplexity, but "
                               f"{why}: give --data wiki (or a text) to score it, or drop {' and '.join(given)}")
    if args.tasks is None and getattr(args, "task_data", None) is not None:
        raise ToolkitError("--task-data chooses where the zero-shot tasks come from: give --tasks too, or drop it")


def eval_command(args: argparse.Namespace) -> int:
    """Check every input, load the model once, score what was asked; returns the exit code."""
    from toolkit.cli.zeroshot import check_zero_shot_args
    from toolkit.data.text import check_text_source
    from toolkit.models.load import load_model
    from toolkit.models.sources import check_model_source
    from toolkit.run.preflight import check_window, check_writable_file
    from toolkit.runtime.devices import resolve_device

    specs = check_zero_shot_args(args.tasks, args.limit, args.task_data or AUTO)  # before any model loads
    data = perplexity_data(args.data, bool(specs))
    check_applicable(args, data)
    args.seqlen = SEQLEN if args.seqlen is None else args.seqlen
    args.encoding = args.encoding or "utf-8"
    windows = parse_windows(args.windows, "--windows")
    if args.json:
        check_writable_file(args.json)
    if data is not None:
        check_window(args.seqlen, windows, "--seqlen", "--windows")
        check_text_source(data, args.encoding)
    check_model_source(args.model)
    resolve_device(args.device)  # an unusable device fails before the model loads
    if data is None:
        print(SKIPPED if args.data is None else "perplexity skipped (--data none)")
    loaded = load_model(args.model, dtype=args.dtype)  # once, for the perplexity and the tasks
    report: dict[str, Any] = {"model": loaded.name, "ppl": {},
                              "protocol": {"model": loaded.name, "model_label": loaded.label}}
    if data is not None:
        value, protocol = _perplexity(args, loaded, data, windows)
        print(f"ppl ({data}, seqlen {args.seqlen}, {protocol['windows']} windows, {protocol['tokens']} tokens): "
              f"{value:.3f}" if math.isfinite(value) else "ppl: not finite")
        report.update(ppl={data: value if math.isfinite(value) else None}, protocol=protocol)
    if specs:
        report["zero_shot"] = _zero_shot(args, specs, loaded)
    if args.json:
        from toolkit.cli.view import write_json

        write_json(args.json, report)
    return 0


def _perplexity(args: argparse.Namespace, loaded: Any, data: str, windows: int | None) -> tuple[float, dict]:
    """The perplexity on ``data``'s test split with a bar over the windows; (ppl, protocol) as evaluate_model's."""
    from toolkit.cli.view import advance_bar
    from toolkit.data.text import eval_windows, load_tokens
    from toolkit.evaluation.perplexity import perplexity
    from toolkit.models.load import bos_id
    from toolkit.run.checks import check_context
    from toolkit.runtime.devices import resolve_device

    check_context(loaded, seqlen=args.seqlen)
    test = eval_windows(load_tokens(data, "test", loaded.codec, args.encoding), args.seqlen, windows, bos_id(loaded))
    bars: dict[str, Any] = {}
    stage = f"ppl {data}"

    def progress(done: int, total: int) -> None:
        advance_bar(bars, stage, done, total, "window")

    try:
        value = perplexity(loaded.model, test, resolve_device(args.device), progress=progress)
    finally:
        for bar in bars.values():
            bar.close()
    return value, {"model": loaded.name, "model_label": loaded.label, "dataset": data, "split": "test",
                   "seqlen": args.seqlen, "windows": int(test.shape[0]), "tokens": int(test.numel())}


def _zero_shot(args: argparse.Namespace, specs: tuple, loaded: Any) -> dict[str, Any]:
    from toolkit.cli.zeroshot import TaskProgress, zero_shot_table
    from toolkit.evaluation.zeroshot import evaluate_tasks
    from toolkit.runtime.devices import resolve_device

    progress = TaskProgress()
    try:
        result = evaluate_tasks(loaded.model, loaded.codec, specs, args.limit, resolve_device(args.device), progress)
    finally:
        progress.close()
    print(zero_shot_table(result, loaded.name))
    return result.to_dict()
