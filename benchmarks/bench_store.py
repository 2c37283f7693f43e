"""``runs`` over a hostile run store: does it list the good runs, quickly, and say why the others are damaged?

Builds a store of ``--good`` finished synthetic runs (:func:`tests.helpers.synthetic_runs.write_run`:
events, four keep-masks, result.json each) beside a ``status.json`` nested 200,000 levels deep, a
``status.json`` that is a named pipe (POSIX), a run whose folder name holds an escape sequence, a
carriage return and a bell, and a run whose config.json values hold escape sequences; then times
``python -m toolkit runs --out STORE``:

- ``listing_s``: ``toolkit.cli.main.main(["runs", ...])`` in this process, each repeat, after one listing
  of an empty store (``warmup_s``) has done the parser's imports;
- ``process_s``: the same command as a fresh ``python -m toolkit runs`` process, interpreter start and
  imports included (killed after ``--timeout`` seconds: a hang shows as ``timed_out``);
- ``process_empty_store_s``: the same fresh process over an empty store (its start and imports alone);
- ``rows``, ``damaged``, ``good_listed`` (of ``good``), ``raw_control_characters`` in the output
  (0: every escape shown escaped), ``exit_code``, and the machine's load average when it started.

Usage: ``python -m benchmarks.bench_store [--good 200] [--repeats 3] [--json FILE]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.records import emit
from tests.helpers.hostile_store import CONFIG, escape_named_run, make_deep, make_escape_config, make_fifo
from tests.helpers.synthetic_runs import write_run
from toolkit.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
RAW = tuple(chr(c) for c in (*range(0x20), *range(0x7F, 0xA0)) if chr(c) != "\n")  # C0 but newline, DEL, C1


def build(root: Path, good: int) -> tuple[list[Path], dict[str, Path]]:
    """The hostile store under ``root``: (the ``good`` finished runs, the four hostile ones by kind)."""
    runs = [write_run(root, CONFIG, seed=seed) for seed in range(good)]
    deep, fifo, config = (write_run(root, CONFIG, seed=good + k) for k in range(3))
    make_deep(deep)
    if hasattr(os, "mkfifo"):
        make_fifo(fifo)
    make_escape_config(config)
    named = escape_named_run(root, seed=good + 3)
    return runs, {"deep": deep, "fifo": fifo, "escape_config": config, "escape_name": named}


def count(out: str, good: set[str]) -> dict[str, int]:
    """Rows, damaged rows, good runs listed and raw control characters in the listing ``out``."""
    lines = out.splitlines()
    listed = {line.split()[0] for line in lines if line.strip()}
    return {"rows": len(lines), "damaged": sum(" damaged: " in line for line in lines),
            "good_listed": len(good & listed), "raw_control_characters": sum(out.count(c) for c in RAW)}


def in_process(store: Path) -> tuple[float, int, str]:
    """(seconds, exit code, stdout) of ``main(["runs", ...])`` here."""
    out = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = main(["runs", "--out", str(store)])
    return time.perf_counter() - start, code, out.getvalue()


def in_a_process(store: Path, timeout: float) -> dict[str, object]:
    """A fresh ``python -m toolkit runs --out STORE``: its wall seconds, exit code and counts (or a timeout)."""
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "toolkit", "runs", "--out", str(store)], capture_output=True,
                              timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"process_s": None, "timed_out": True}
    return {"process_s": round(time.perf_counter() - start, 3), "timed_out": False,
            "process_exit_code": proc.returncode, "process_stdout": proc.stdout.decode("utf-8", "replace")}


def measure(args: argparse.Namespace) -> dict[str, object]:
    """Build the store, list it ``--repeats`` times here and once in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="prunelab-store-") as folder:
        store = Path(folder) / "runs"
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        built = time.perf_counter()
        runs, _ = build(store, args.good)
        build_s = time.perf_counter() - built
        good = {path.name for path in runs}
        (Path(folder) / "empty").mkdir()
        warmup_s = in_process(Path(folder) / "empty")[0]  # the parser's imports (torch among them), once
        times, code, out = [], 0, ""
        for _ in range(args.repeats):
            seconds, code, out = in_process(store)
            times.append(round(seconds, 3))
        process = in_a_process(store, args.timeout)
        process_out = str(process.pop("process_stdout", ""))
        empty = in_a_process(Path(folder) / "empty", args.timeout)["process_s"]
    return {"bench": "store_hostile", "good": args.good, "hostile": ["status.json 200,000 levels deep",
            "status.json a named pipe" if hasattr(os, "mkfifo") else "no named pipe (not POSIX)",
            "escape sequences in a folder name", "escape sequences in config.json values"],
            "warmup_s": round(warmup_s, 3), "listing_s": times, "exit_code": code, **count(out, good), **process,
            "process_counts": count(process_out, good) if process_out else None, "process_empty_store_s": empty,
            "build_s": round(build_s, 1),
            "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                        "load_average_1min_at_start": load, "python": platform.python_version()}}


def main_bench() -> None:
    """Parse the flags, measure, print (and append) one JSON line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--good", type=int, default=200, help="finished runs beside the hostile ones")
    parser.add_argument("--repeats", type=int, default=3, help="in-process listings timed")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before the fresh process is killed")
    parser.add_argument("--json", default=None, help="append the JSON line to this file")
    args = parser.parse_args()
    emit(measure(args), args.json)


if __name__ == "__main__":
    main_bench()
