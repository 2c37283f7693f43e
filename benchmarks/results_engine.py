"""The "data-free methods" section of ``docs/results.md``: magnitude and RTN with and without a calibration pass.

Read from ``benchmarks/results/engine_data_free_cpu.jsonl`` (records of ``benchmarks/bench_prune.py
--no-eval --calibrate auto|always``). Per run and calibration mode: the median prune seconds over its
records, the peak RSS, and the seconds per phase; magnitude at 50 % beside the figure the reference code
(the official Thanos repository, which carries magnitude) took on the same model, calibration and one core,
quoted as it was measured, with the ratio to it.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from benchmarks.results_read import Lines, Section, commits, records_of, table_lines

FILE = "engine_data_free_cpu.jsonl"
# the reference code's prune seconds and peak RSS (MiB) on smollm2-135m, 32 × 512 calibration, one core, one thread
REFERENCE = {"magnitude@50%": (8.7, 1340)}
GOAL = 1.5  # magnitude's prune time within this multiple of the reference's
HEADER = ["run", "calibration pass", "prune s (median, runs)", "× reference", "peak RSS MiB", "phases s (median run)"]


def _phases(record: dict[str, Any]) -> str:
    phases = record.get("phases") or {}
    return "  ".join(f"{name} {seconds:.1f}" for name, seconds in phases.items() if seconds >= 0.05) or "–"


def _groups(records: list[dict[str, Any]]) -> dict[tuple[str, bool], list[dict[str, Any]]]:
    groups: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for record in records:
        if record.get("benchmark") == "prune":
            groups.setdefault((str(record["run"]), bool(record.get("calibration_used", True))), []).append(record)
    return groups


def render_data_free(paths: list[Path]) -> Lines:
    """The table, and the sentence on the goal against the reference."""
    records = records_of(paths)
    groups = _groups(records)
    if not groups:
        return ["No measurement yet: run `benchmarks/bench_prune.py --no-eval --calibrate auto` (command below)."]
    rows, verdicts = [], []
    for (run, used), found in sorted(groups.items(), key=lambda item: (item[0][0], not item[0][1])):
        seconds = statistics.median(r["prune_seconds"] for r in found)
        middle = min(found, key=lambda r: abs(r["prune_seconds"] - seconds))
        reference = REFERENCE.get(run)
        ratio = "–" if reference is None else f"{seconds / reference[0]:.2f}× ({reference[0]} s)"
        rss = max(r["peak_rss_mb"] for r in found)
        rss_text = f"{rss:.0f}" + ("" if reference is None else f" (reference {reference[1]})")
        rows.append([run, "yes (`--calibrate always`)" if used else "no (data-free)", f"{seconds:.1f} ({len(found)})",
                     ratio, rss_text, _phases(middle)])
        if reference is not None and not used:
            met = "within" if seconds <= GOAL * reference[0] else "NOT within"
            verdicts.append(f"- {run} without its calibration pass: {seconds:.1f} s, {seconds / reference[0]:.2f}× "
                            f"the reference code's {reference[0]} s: {met} the goal of {GOAL}×.")
    return [*table_lines(HEADER, rows), "", *verdicts, "",
            f"Commits: {', '.join(f'`{c}`' for c in commits(records))}."]


ENGINE_SECTIONS = (
    Section(
        "Data-free methods: magnitude and RTN without a calibration pass (one core)",
        (FILE,),
        render_data_free,
        "`smollm2-135m`, calibration 32 × 512 tokens of wiki train (read only by the rows with a calibration "
        "pass), `--no-eval`, one thread (`OMP_NUM_THREADS=1`), on the 2-core development machine while other "
        "benchmarks ran on the second core. \"prune s\" is the engine's time from the first layer to the last "
        "(the run's `prune_seconds`); the model's load is not in it. A data-free method (`MethodSpec.data_free`) "
        "reads the weights alone: without the pass no text is read, no layer input captured, no statistic "
        "gathered and no layer output propagated (`toolkit/engine/data_free.py`); `--calibrate always` runs the "
        "pass anyway, the path every run took before (the same weights: `tests/engine/test_data_free.py`). "
        "The reference figures are the official Thanos repository's magnitude on the same model, calibration "
        "and one core, measured side by side with PruneLab's engine of the time, quoted here.",
        """for mode in auto always; do
  OMP_NUM_THREADS=1 python -m benchmarks.bench_prune --no-eval --calibrate $mode \\
      --runs magnitude@50% rtn@int4 --json benchmarks/results/engine_data_free_cpu.jsonl
done""",
    ),
)
