"""Time the class Lesson from an empty run store, and how good its running estimate was; one JSON line.

    python -m benchmarks.bench_lesson_class [--model smollm2-135m] [--json benchmarks/results/cpu_lesson_class.jsonl]

Runs :func:`toolkit.teach.lesson.run_lesson` on a fresh run store (a temporary folder unless
``--runs``), with the app's clock (:class:`toolkit.teach.lesson_clock.LessonClock`) folded on every
event. Unless ``--keep-cache``, the dense perplexity cache is left out too (a temporary
``PRUNELAB_CACHE`` that links the converted model and the token cache only), so the first run
measures the dense model as a class would the first time.

The line holds ``wall_seconds`` (first run's start → last run's end), ``seconds`` per method,
``cpu_seconds`` (this process, every thread), the load average (1 min) sampled every 5 s
(``load_mean``, ``load_max``) and ``cpus``; ``estimates``: the estimated total (elapsed + about
left) at 10, 20, 30 and 60 s and at 25, 50 and 75 % of the actual, with its error
(estimate / actual − 1) and the error of the time left alone; ``measured``: seconds per unit of each
kind of work (the clock's profile, to compare with :data:`toolkit.teach.lesson.REFERENCE`); ``ppl``:
each finished run's perplexity on the evaluation windows and the dense one (the class ranking).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from app.jobs import DONE, Job
from benchmarks.records import emit
from toolkit.api import list_runs
from toolkit.events import Event
from toolkit.models.sources import cache_dir
from toolkit.teach import lesson

MOMENTS = (10.0, 20.0, 30.0, 60.0)  # seconds after the start at which the estimate is read
FRACTIONS = (0.25, 0.5, 0.75)  # fractions of the actual wall time at which the estimate is read
LOAD_EVERY = 5.0  # seconds between two load-average samples
KEPT = ("dense_ppl.json", "dense_zero_shot.json")  # the caches a fresh class would not have


def fresh_cache(root: Path) -> Path:
    """A cache folder linking everything of the current one but the dense-model caches."""
    source = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        for entry in source.iterdir():
            if entry.name not in KEPT and not (root / entry.name).exists():
                (root / entry.name).symlink_to(entry.resolve())
    return root


def run(model: str, runs: str) -> dict[str, Any]:
    """Run the lesson from ``runs`` (its runs are made there); return the timings and the clock's samples."""
    plan = lesson.plan_lesson(model, runs)
    cpu0, start = time.process_time(), lesson.wall_clock()
    clock = plan.clock(start)
    samples: list[tuple[float, float]] = []  # (elapsed, estimated seconds left)
    loads: list[float] = []
    seconds: dict[str, float] = {}
    statuses: dict[str, str] = {}
    next_load = run_start = start
    job = Job()
    job.start(lambda: lesson.run_lesson(plan, job.token))
    while (item := job.get(0.5)) is not DONE:  # None every half second while the run is silent: a sample
        now = lesson.wall_clock()
        if isinstance(item, lesson.LessonPoint):
            clock.ended(item.method, now)
            statuses[item.method], seconds[item.method] = item.status, round(now - run_start, 1)
            run_start = now
        elif isinstance(item, Event):
            clock.apply(item, now)
        elif isinstance(item, tuple):
            statuses["lesson"] = f"error: {item[1]}"
        if not samples or now - start - samples[-1][0] >= 0.5:
            samples.append((now - start, clock.seconds_left(now)))
        if now >= next_load:
            loads.append(os.getloadavg()[0])
            next_load = now + LOAD_EVERY
    wall, cpu = lesson.wall_clock() - start, time.process_time() - cpu0
    return {"wall": wall, "cpu": cpu, "samples": samples, "loads": loads, "ppl": perplexities(runs),
            "seconds": seconds, "statuses": statuses, "measured": clock.measured(), "methods": plan.to_run}


def perplexities(runs: str) -> dict[str, float]:
    """Each finished run's perplexity in ``runs`` (method → value) and the dense model's (``dense``)."""
    found: dict[str, float] = {}
    for record in list_runs(runs):
        result, data = record.result or {}, str(record.config.get("eval_data") or "")
        if record.status == "finished" and data in (result.get("ppl") or {}):
            found[str(record.config.get("method"))] = round(float(result["ppl"][data]), 2)
            found["dense"] = round(float((result.get("dense_ppl") or {}).get(data, float("nan"))), 2)
    return found


def estimate_at(samples: list[tuple[float, float]], moment: float, wall: float) -> dict[str, float | None] | None:
    """The estimate read at ``moment`` seconds: estimated total, its error, and the error of the time left."""
    before = [s for s in samples if s[0] <= moment]
    if not before or moment >= wall:
        return None
    at, left = before[-1]
    total = at + left
    actual_left = wall - at
    return {"at": round(at, 1), "estimated_total": round(total, 1), "error": round(total / wall - 1, 3),
            "left": round(left, 1), "actual_left": round(actual_left, 1),
            "left_error": round(left / actual_left - 1, 3) if actual_left > 0 else None}


def main(argv: list[str] | None = None) -> int:
    """Print (and append to ``--json``) one JSON object; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_lesson_class",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--runs", default=None, help="run store to make the runs in (default: a new temporary one)")
    parser.add_argument("--keep-cache", action="store_true", help="let the first run use a cached dense perplexity")
    parser.add_argument("--json", default=None, help="append the line to this JSONL file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lesson-class-") as scratch:
        if not args.keep_cache:
            os.environ["PRUNELAB_CACHE"] = str(fresh_cache(Path(scratch) / "cache"))
        runs = args.runs or str(Path(scratch) / "runs")
        done = run(args.model, runs)
    wall = done["wall"]
    estimates = {f"{m:g}s": estimate_at(done["samples"], m, wall) for m in MOMENTS}
    estimates.update({f"{f:.0%}": estimate_at(done["samples"], f * wall, wall) for f in FRACTIONS})
    first = done["samples"][0] if done["samples"] else (0.0, float("nan"))
    loads = done["loads"] or [os.getloadavg()[0]]
    line = {"bench": "lesson_class", "model": args.model, "methods": [c.method for c in done["methods"]],
            "settings": lesson.settings_text(), "dense_cache": "kept" if args.keep_cache else "empty",
            "wall_seconds": round(wall, 1), "cpu_seconds": round(done["cpu"], 1), "seconds": done["seconds"],
            "statuses": done["statuses"], "cpus": os.cpu_count(), "load_mean": round(sum(loads) / len(loads), 2),
            "load_max": round(max(loads), 2), "reference_estimate": round(first[1], 1), "estimates": estimates,
            "measured": {k: round(v, 3) for k, v in done["measured"].items()},
            "reference": {"load": lesson.REFERENCE.load, "window": lesson.REFERENCE.window,
                          "prompt": lesson.REFERENCE.prompt, "layer": lesson.REFERENCE.layer},
            "ppl": done["ppl"], "under_5_min": wall <= 300.0}
    emit(line, args.json)
    return 0 if all(s == "finished" for s in done["statuses"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
