"""Time the Lesson when its four runs are in the store: plan, read the runs back, build every figure; one JSON line.

    python -m toolkit prune --model smollm2-135m --method M --sparsity 50% --nsamples 8 --seqlen 128 \\
        --eval-seqlen 128 --eval-windows 16 --eval-dense --generate --out runs_lesson    # once per method
    python -m benchmarks.bench_lesson --runs runs_lesson [--model smollm2-135m]

The timed part is what the Lesson button does after the click (:func:`app.lesson_tab.lesson_stream`):
look the runs up, read their events and one linear's masks, build the four figures, the generations
table and the walkthrough. ``seconds`` is its wall time, ``reused`` the runs taken from the store.
A store that lacks a lesson run is refused (the benchmark measures the reuse path only).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from app.lesson_tab import lesson_stream
from toolkit import lesson
from toolkit.errors import ToolkitError


def main(argv: list[str] | None = None) -> int:
    """Print one JSON object: model, runs folder, reused runs, seconds to the finished lesson, status line."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_lesson", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", default="runs", help="run store holding the four lesson runs")
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args(argv)
    try:
        plan = lesson.plan_lesson(args.model, args.runs)
    except ToolkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if plan.to_run:
        missing = ", ".join(c.method for c in plan.to_run)
        print(f"error: {args.runs} lacks the lesson runs of {missing}; make them first (see the module docstring)",
              file=sys.stderr)
        return 2
    start = time.perf_counter()
    final: dict = {}
    for update in lesson_stream(args.model, args.runs):
        final.update(update)
    seconds = time.perf_counter() - start
    reused = {m: r.run_id for m, r in plan.stored.items() if r is not None}
    print(json.dumps({"bench": "lesson", "model": args.model, "runs": args.runs, "reused": reused,
                      "seconds": round(seconds, 3), "status": final.get("status", "")}))
    return 0 if "lesson ready" in final.get("status", "") else 1


if __name__ == "__main__":
    raise SystemExit(main())
