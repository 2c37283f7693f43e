"""The "Lesson for a class" table of ``docs/results.md``: the class Lesson's wall time from an empty run store and
how far its running estimate was from the actual, read from ``bench_lesson_class.py``'s records."""

from __future__ import annotations

from pathlib import Path

from benchmarks.results_read import Lines, Record, Section, num, records_of, table_lines

MOMENTS = ("10s", "20s", "30s", "60s", "25%", "50%", "75%")


def _minutes(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds / 60:.1f} min ({seconds:.0f} s)"


def _estimate(record: Record, moment: str) -> str:
    found = (record.get("estimates") or {}).get(moment)
    if not found:
        return ""
    return f"{found['estimated_total']:.0f} s ({found['error']:+.0%})"


def render_lesson_class(paths: list[Path]) -> Lines:
    """One row per measured lesson (wall, CPU, load, per method), then the estimate read at each moment."""
    records = [r for r in records_of(paths) if r.get("bench") == "lesson_class"]
    if not records:
        return ["No class-lesson measurement yet."]
    rows = []
    for r in records:
        seconds = r.get("seconds") or {}
        rows.append([r.get("model", ""), _minutes(r.get("wall_seconds")), num(r.get("cpu_seconds"), 0),
                     f"{r.get('load_mean', 0):.1f} (max {r.get('load_max', 0):.1f}) on {r.get('cpus')} CPUs",
                     ", ".join(f"{m} {s:.0f} s" for m, s in seconds.items()), r.get("dense_cache", ""),
                     _ranking(r), num(r.get("under_5_min"))])
    lines = table_lines(["model", "wall, empty store", "CPU s (process)", "load average (1 min)",
                         "seconds per run", "dense cache", "perplexity (8 windows)", "≤ 5 min"], rows)
    lines += ["", "The estimate of the whole lesson's wall time (elapsed + \"about X left\") read at each moment, "
              "and its error against the actual wall time:", ""]
    estimate_rows = [[_minutes(r.get("wall_seconds")), _profile(r), f"{r.get('reference_estimate', 0):.0f} s",
                      *(_estimate(r, m) for m in MOMENTS)] for r in records]
    return lines + table_lines(["actual", "reference profile", "before any measurement", *MOMENTS], estimate_rows)


def _ranking(record: Record) -> str:
    """The runs' perplexities, lowest first (recorded from the fifth measurement on)."""
    ppl = dict(record.get("ppl") or {})
    dense = ppl.pop("dense", None)
    order = " < ".join(f"{m} {v:.1f}" for m, v in sorted(ppl.items(), key=lambda item: item[1]))
    return f"{order} (dense {dense:.1f})" if order and dense is not None else order


def _profile(record: Record) -> str:
    """Which reference profile the clock scaled: recorded from the second measurement on."""
    reference = record.get("reference")
    if not reference:
        return "pieced from single runs (FISTAPruner layer 12.5 magnitude layers)"
    layers = reference.get("layer") or {}
    window = float(reference.get("window") or 0)
    if layers.get("fista") and window and window < 1:  # the same, with the window the old clock overcounted fixed
        return (f"two quiet lessons, in windows, the window corrected to one (FISTAPruner layer "
                f"{layers['fista'] / window:.1f} windows)")
    if layers.get("fista") and window and window < 5:  # from the quiet lessons: in units of their window
        return f"two quiet lessons, in windows (FISTAPruner layer {layers['fista'] / window:.1f} windows)"
    ratio = layers.get("fista", 0) / layers["magnitude"] if layers.get("magnitude") else 0
    return f"a measured lesson (FISTAPruner layer {ratio:.1f} magnitude layers)"


LESSON_CLASS_SECTIONS = [
    Section(
        "Lesson for a class: wall time from an empty run store and the estimate's error",
        ("cpu_lesson_class.jsonl",),
        render_lesson_class,
        "The Lesson's class preset on `smollm2-135m` (`toolkit/teach/lesson.py`): magnitude, Wanda, SparseGPT and "
        "FISTAPruner at 50 %, calibration 16 × 128 tokens of `wiki` train, perplexity on 8 windows of 128 tokens of "
        "`wiki` test (dense and pruned), 5 greedy prompts × 32 new tokens per model (16 from row 5), layer output "
        "error on 2 calibration windows, 1 CPU thread, FISTAPruner at most 2 λ rounds of 10 iterations. A fresh run "
        "store and "
        "no dense-perplexity cache. On the 2-core development machine: rows 1-4 while other jobs ran on it, the "
        "benchmark under `nice -n 10` (the load average column says how shared it was); row 5 while no other job "
        "ran, without nice (its load average is the lesson's own). The runs compute on one thread, so the process's "
        "CPU seconds are the lesson's work; with a core to itself (row 5) the wall time is within 2 % of them. "
        "Rows in the order measured, each with the clock of its "
        "day: (1) the reference profile pieced from single runs; (2) the first lesson's measured profile; (3) as (2), "
        "the first run's load kept out of the pace; (4) as (3), the run under way timed at its own pace across its "
        "layers (it was reset at every layer before); (5) the reference profile of rows 3 and 4 in units of their "
        "perplexity window (the probe: the estimate is this machine's from the first window on), 16 new tokens per "
        "prompt. The ranking column is recorded from row 5 on.",
        "python -m benchmarks.bench_lesson_class --json benchmarks/results/cpu_lesson_class.jsonl",
    ),
]
