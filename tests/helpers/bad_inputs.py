"""The catalogue of bad inputs: each case, the command, and the one line the user must see.

``tests/cli/test_bad_input_catalogue.py`` runs every case and ``python -m benchmarks.bad_input_doc``
writes the same runs into ``docs/bad_input.md`` (the test fails while a case's line there differs).

A case is one frozen :class:`BadInput`; to add one, append it to :data:`CASES`:

- ``name``: a unique kebab-case id (the test id and the doc's first column);
- ``what``: the case in plain words (the doc's "case" column);
- ``argv``: the words after ``python -m toolkit``; ``{tmp}`` becomes a fresh empty folder;
- ``code``: the exit code (2 for a refused input; 0 for ``runs``, which lists a damaged run and goes on);
- ``says``: a substring of the one line the user sees;
- ``stream``: ``"stderr"`` (the only non-blank line on stderr, starting ``error:``; stdout empty) or
  ``"stdout"`` (exactly one stdout line holds ``says``, stderr is empty: a ``damaged`` row of ``runs``);
- ``setup``: ``None``, or a function of the ``{tmp}`` folder that writes the bad files first (a store,
  an allocation file); it may return nothing;
- ``process``: run in a fresh ``python -m toolkit`` process killed after :data:`PROCESS_TIMEOUT_S`
  (a case that could hang) instead of calling :func:`toolkit.cli.main.main` in this process;
- ``slow``: the case loads a model (the test is then marked slow).

Every case must also leave no traceback and (for refusals) no run folder claiming success. The
helpers at the bottom build the bad stores (:mod:`tests.helpers.hostile_store`).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tests.helpers import hostile_store as hostile
from tests.helpers.synthetic_runs import write_run

ROOT = Path(__file__).resolve().parents[2]
PROCESS_TIMEOUT_S = 300  # a fresh process imports torch (seconds on a busy 2-core CPU); a hang never ends
TINY = ("--model", "tiny-llama", "--nsamples", "4", "--seqlen", "64", "--eval-seqlen", "64", "--eval-windows", "3")


@dataclass(frozen=True)
class BadInput:
    """One bad input and what the user must see (see the module docstring for each field)."""

    name: str
    what: str
    argv: tuple[str, ...]
    code: int
    says: str
    stream: Literal["stderr", "stdout"] = "stderr"
    setup: Callable[[Path], object] | None = None
    process: bool = False
    slow: bool = False


@dataclass(frozen=True)
class Outcome:
    """What one run of a case printed: its exit code, stdout and stderr (``{tmp}`` already put back)."""

    code: int
    out: str
    err: str

    def lines(self, stream: str) -> list[str]:
        """The non-blank lines of ``stream`` ("stdout" | "stderr")."""
        return [line for line in (self.out if stream == "stdout" else self.err).splitlines() if line.strip()]


def run_case(case: BadInput, tmp: Path) -> Outcome:
    """Build the case's files under ``tmp``, run its command, return what it printed."""
    if case.setup is not None:
        case.setup(tmp)
    argv = [word.replace("{tmp}", str(tmp)) for word in case.argv]
    if case.process:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        proc = subprocess.run([sys.executable, "-m", "toolkit", *argv], capture_output=True, timeout=PROCESS_TIMEOUT_S,
                              cwd=ROOT, env=env)
        code, out, err = proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
    else:
        from toolkit.cli.main import main

        out_buffer, err_buffer = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out_buffer), contextlib.redirect_stderr(err_buffer):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's own refusals
                code = exc.code if isinstance(exc.code, int) else 2
        out, err = out_buffer.getvalue(), err_buffer.getvalue()
    return Outcome(code=code, out=out.replace(str(tmp), "{tmp}"), err=err.replace(str(tmp), "{tmp}"))


RUN_ID = re.compile(r"\b\d{8}-\d{6}-[\w%-]*?-[0-9a-f]{4}\b")


def seen_line(case: BadInput, outcome: Outcome) -> str:
    """The line the case is about, as the doc shows it: run ids as ``RUN``, column padding as one space."""
    lines = [line for line in outcome.lines(case.stream) if case.says in line]
    line = lines[0] if lines else (outcome.lines(case.stream) or [""])[0]
    return re.sub(r" {2,}", " ", RUN_ID.sub("RUN", line)).strip()


# ---- the bad stores: one finished run beside each damaged one, under {tmp}/runs


def _store_with(damage: Callable[[Path], object]) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        write_run(tmp / "runs", hostile.CONFIG, seed=0)
        damage(write_run(tmp / "runs", hostile.CONFIG, seed=1))
    return setup


RUNS = ("runs", "--out", "{tmp}/runs")
STORE_CASES = [
    BadInput("store-deep-json", "a status.json nested 200,000 levels deep", RUNS, 0,
             "damaged: status.json nested deeper than 64 levels", "stdout", _store_with(hostile.make_deep)),
    BadInput("store-fifo", "a status.json that is a named pipe (mkfifo)", RUNS, 0,
             "damaged: status.json is not a regular file (a named pipe)", "stdout", _store_with(hostile.make_fifo),
             process=True),
    BadInput("store-huge-file", "a status.json one byte over 16 MiB", RUNS, 0,
             "damaged: status.json is 16,777,217 bytes, over the 16,777,216", "stdout",
             _store_with(hostile.make_huge)),
    BadInput("store-link-out", "a result.json that links to a file outside the run folder", RUNS, 0,
             "damaged: result.json is a link that leaves the run folder", "stdout", _store_with(hostile.make_link_out)),
    BadInput("store-non-utf8", "a config.json holding bytes that are not UTF-8", RUNS, 0,
             "damaged: config.json is not UTF-8 text", "stdout", _store_with(hostile.make_non_utf8)),
    BadInput("store-truncated", "a result.json cut short (a crash mid-write)", RUNS, 0,
             "damaged: result.json is not valid JSON (truncated?", "stdout", _store_with(hostile.make_truncated)),
    BadInput("store-escape-name", "a run folder named with an escape sequence, a carriage return and a bell", RUNS,
             0, "\\x1b[31mred\\r\\x07", "stdout", lambda tmp: hostile.escape_named_run(tmp / "runs")),
    BadInput("store-escape-config", "config.json values holding escape sequences (window title, screen clear)",
             RUNS, 0, "tiny\\x1b]0;pwned\\x07", "stdout", _store_with(hostile.make_escape_config)),
    BadInput("store-missing", "--out names no folder", ("runs", "--out", "{tmp}/missing"), 2,
             "does not exist or is not a folder"),
]

# ---- refusals before any model loads (tiny-llama is built in memory, and only after these checks)

PRUNE = ("prune", *TINY, "--out", "{tmp}/runs")
CLI_CASES = [
    BadInput("prune-unknown-method", "a misspelt method", (*PRUNE, "--method", "wandda"), 2, "Did you mean: wanda"),
    BadInput("prune-sparsity-one", "a sparsity of 1.2", (*PRUNE, "--sparsity", "1.2"), 2, "outside [0, 1)"),
    BadInput("prune-nm-reversed", "an n:m pattern with n > m", (*PRUNE, "--sparsity", "4:2"), 2, "0 < n < m"),
    BadInput("prune-quant-int5", "a quantization width that does not exist", (*PRUNE, "--quant", "int5"), 2,
             "use int2, int3, int4 or int8"),
    BadInput("prune-option-type", "a method option of the wrong type",
             (*PRUNE, "--method", "sparsegpt", "--set", "block_size=big"), 2, "must be int"),
    BadInput("prune-option-unknown", "a method option that does not exist",
             (*PRUNE, "--method", "sparsegpt", "--set", "blocksize=3"), 2, "no option"),
    BadInput("prune-set-syntax", "--set without key=value", (*PRUNE, "--set", "xi"), 2, "--set takes key=value"),
    BadInput("recover-not-a-run", "recover a folder that is not a run", ("recover", "{tmp}/missing"), 2,
             "not a run folder"),
    BadInput("export-not-a-run", "export a folder that is not a run", ("export", "{tmp}/missing"), 2,
             "is not a run folder"),
    BadInput("export-no-model", "export a run that saved no model", ("export", "{tmp}/run"), 2,
             "saved no model: prune again with --save-model", setup=lambda tmp: _run_at(tmp / "run")),
    BadInput("eval-nothing-to-do", "eval with --data none and no --tasks",
             ("eval", "--model", "no-such-model", "--data", "none"), 2, "--data none leaves nothing to evaluate"),
    BadInput("prune-gptq-keep-zeros", "a keep_zeros for GPTQ that is not auto, on or off",
             (*PRUNE, "--method", "gptq", "--quant", "int4", "--set", "keep_zeros=yes"), 2,
             "keep_zeros of gptq must be one of"),
]

# ---- input files (allocation, structure, calibration text) and flags that would not apply: refused before the
# model loads and before a run folder exists, in memory and with --stream


def _write(name: str, text: str) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        (tmp / name).write_text(text, encoding="utf-8")
    return setup


def _checkpoint(structure: str | None = None) -> Callable[[Path], None]:
    """A tiny-llama checkpoint folder at {tmp}/model, with ``structure`` as its prunelab_structure.json."""
    def setup(tmp: Path) -> None:
        from tests.models.test_stream import save_tiny

        save_tiny(tmp / "model", "llama", "float32")
        if structure is not None:
            (tmp / "model" / "prunelab_structure.json").write_text(structure, encoding="utf-8")
        (tmp / "ratios.json").write_text("[0.5, 0.5, 0.5]", encoding="utf-8")
    return setup


ALLOC = (*PRUNE, "--allocation", "{tmp}/ratios.json")
STREAM = ("prune", "--model", "{tmp}/model", "--stream", "--eval", "none", "--nsamples", "4", "--seqlen", "64",
          "--out", "{tmp}/runs", "--allocation", "{tmp}/ratios.json")
SHRUNK = '{"format": "prunelab-shrunk/2", "model_type": "llama", "layers": %s}'
THREE_LAYERS = "[" + ", ".join(['{"modules": {"q": {"in": 64, "out": 64, "bias": false}}}'] * 3) + "]"
EVAL_TASKS = ("eval", "--model", "tiny-llama", "--tasks", "rte", "--task-data", "local")
INPUT_FILE_CASES = [
    BadInput("alloc-layer-count", "an allocation file with 3 ratios for a 2-layer model", ALLOC, 2,
             "has 3 layer ratios; the model has 2 decoder layers", setup=_write("ratios.json", "[0.5, 0.5, 0.5]")),
    BadInput("alloc-layer-count-stream", "the same with --stream", STREAM, 2,
             "has 3 layer ratios; the model has 2 decoder layers", setup=_checkpoint()),
    BadInput("alloc-ratio-one", "an allocation ratio of 1.0", ALLOC, 2, "layer 1's ratio 1 is outside [0, 1)",
             setup=_write("ratios.json", '{"layers": [0.5, 1.0]}')),
    BadInput("alloc-ratio-negative", "a negative allocation ratio", ALLOC, 2, "layer 0's ratio -0.2 is outside [0, 1)",
             setup=_write("ratios.json", '{"layers": [-0.2, 0.5]}')),
    BadInput("alloc-ratio-nan", "a NaN allocation ratio", ALLOC, 2, "layer 0's ratio nan is not a finite number",
             setup=_write("ratios.json", '{"layers": [NaN, 0.5]}')),
    BadInput("alloc-ratio-inf", "an infinite allocation ratio", ALLOC, 2, "layer 1's ratio inf is not a finite number",
             setup=_write("ratios.json", '{"layers": [0.5, Infinity]}')),
    BadInput("alloc-total", "allocation ratios whose total is not --sparsity", ALLOC, 2,
             "the ratios give a total sparsity of 0.4000", setup=_write("ratios.json", '{"layers": [0.3, 0.5]}')),
    BadInput("alloc-folder", "an allocation 'file' that is a folder", ALLOC, 2, "is a folder, not a file",
             setup=lambda tmp: (tmp / "ratios.json").mkdir()),
    BadInput("alloc-owl-inf", "OWL with an infinite outlier threshold", (*PRUNE, "--allocation", "owl:inf,0.1"), 2,
             "M and λ must be finite numbers"),
    BadInput("alloc-owl-lambda", "OWL with λ ≥ 1", (*PRUNE, "--allocation", "owl:5,1"), 2, "λ must be in [0, 0.5)"),
    BadInput("alloc-quantize-only", "--allocation with a quantize-only method",
             (*PRUNE, "--method", "rtn", "--quant", "int4", "--allocation", "owl"), 2,
             "rtn quantizes only and prunes nothing: drop --allocation"),
    BadInput("structure-layers-string", 'a structure file with "layers": "ab"', ("prune", "--model", "{tmp}/model",
             "--out", "{tmp}/runs"), 2, '"layers" must be a non-empty list with one object per decoder layer, got the '
             "string 'ab'", setup=_checkpoint(SHRUNK % '"ab"')),
    BadInput("structure-layer-count", "a structure file listing 3 layers for a 2-layer config",
             ("prune", "--model", "{tmp}/model", "--out", "{tmp}/runs"), 2,
             "lists 3 decoder layers, config.json says 2",
             setup=_checkpoint(SHRUNK % THREE_LAYERS)),
    BadInput("calib-empty", "an empty calibration text file", (*PRUNE, "--calib", "{tmp}/calib.txt"), 2,
             "is empty (or only whitespace)", setup=_write("calib.txt", " \n")),
    BadInput("calib-short", "a calibration text with fewer tokens than nsamples × seqlen",
             (*PRUNE, "--calib", "{tmp}/calib.txt"), 2, "the calibration text has 10 tokens, fewer than nsamples × "
             "seqlen = 4 × 64", setup=_write("calib.txt", "short text")),
    BadInput("eval-windows-without-data", "eval --tasks with --windows and --seqlen but no --data",
             (*EVAL_TASKS, "--windows", "2", "--seqlen", "64"), 2,
             "--seqlen and --windows apply to the perplexity, but with --tasks the perplexity is scored only when "
             "--data is given"),
    BadInput("eval-task-data-without-tasks", "eval --task-data without --tasks",
             ("eval", "--model", "tiny-llama", "--task-data", "local"), 2,
             "--task-data chooses where the zero-shot tasks come from: give --tasks too"),
    BadInput("prune-eval-windows-eval-none", "prune --eval none with --eval-windows and --eval-dense",
             (*PRUNE, "--eval", "none", "--eval-windows", "2", "--eval-dense"), 2,
             "--eval-windows and --eval-dense apply to the perplexity, but --eval none skips the perplexity"),
    BadInput("prune-task-limit-without-tasks", "prune --task-limit without --tasks",
             (*PRUNE, "--task-limit", "5"), 2, "--task-limit applies to the zero-shot tasks, which run only with "
             "--tasks"),
    BadInput("prune-generate-tokens-without-generate", "prune --generate-tokens without --generate",
             (*PRUNE, "--generate-tokens", "8"), 2, "--generate-tokens sets the length of --generate's texts: give "
             "--generate too"),
]

CASES: list[BadInput] = [*STORE_CASES, *CLI_CASES, *INPUT_FILE_CASES]


def _run_at(path: Path) -> Path:
    """A finished synthetic run (no saved model) moved to ``path``, so a case's command can name it."""
    return write_run(path.parent / "store", hostile.CONFIG).rename(path)
