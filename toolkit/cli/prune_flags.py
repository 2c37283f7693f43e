"""``prune``: a flag of a stage that does not run is refused with one line, never silently ignored.

The stages and their flags: the perplexity (``--eval-seqlen``, ``--eval-windows``, ``--eval-dense``;
it runs unless ``--eval none``, and ``--stream`` runs none unless ``--eval`` is given), the zero-shot
tasks (``--task-limit``, ``--task-data``; they run with ``--tasks``) and the generations
(``--generate-tokens``; they run with ``--generate``). ``eval`` does the same for its own flags
(:func:`toolkit.cli.evaluate.check_applicable`). The parser leaves these flags None when not given.
"""

from __future__ import annotations

import argparse

from toolkit.errors import ToolkitError

PERPLEXITY_FLAGS = (("eval_seqlen", "--eval-seqlen"), ("eval_windows", "--eval-windows"))
TASK_FLAGS = (("task_limit", "--task-limit"), ("task_data", "--task-data"))


def _given(args: argparse.Namespace, flags: tuple[tuple[str, str], ...]) -> list[str]:
    return [flag for name, flag in flags if getattr(args, name, None) is not None]


def applies(flags: list[str]) -> str:
    """``--a applies`` / ``--a and --b apply``: the start of a refusal of flags whose stage does not run."""
    return f"{' and '.join(flags)} appl{'ies' if len(flags) == 1 else 'y'}"


def check_prune_flags(args: argparse.Namespace, eval_data: str | None) -> None:
    """Raise :class:`ToolkitError` for a flag whose stage does not run; ``eval_data`` None: no perplexity."""
    if eval_data is None:
        given = _given(args, PERPLEXITY_FLAGS) + (["--eval-dense"] if getattr(args, "eval_dense", False) else [])
        if given:
            why = ("--stream scores no perplexity unless --eval is given" if getattr(args, "stream", False)
                   and args.eval is None else "--eval none skips the perplexity")
            raise ToolkitError(f"{applies(given)} to the perplexity, but {why}: give --eval wiki (or a text) to "
                               f"score it, or drop {' and '.join(given)}")
    if getattr(args, "tasks", None) is None and (given := _given(args, TASK_FLAGS)):
        raise ToolkitError(f"{applies(given)} to the zero-shot tasks, which run only with --tasks: give --tasks "
                           f"too, or drop {' and '.join(given)}")
    if not getattr(args, "generate", False) and getattr(args, "generate_tokens", None) is not None:
        raise ToolkitError("--generate-tokens sets the length of --generate's texts: give --generate too, or drop it")
