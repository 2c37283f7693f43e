"""Time the Lesson when its four runs are in the store: plan, read the runs back, build every figure; one JSON line.

    python -m benchmarks.bench_lesson_class --runs runs_lesson    # makes the four runs of the class preset
    python -m benchmarks.bench_lesson --runs runs_lesson [--model smollm2-135m] [--browser [--screenshot FILE.png]]

The timed part is what the Lesson button does after the click (:func:`app.lesson_tab.lesson_stream`):
look the runs up, read their events and one linear's masks, build the four figures, the generations
table and the walkthrough. ``seconds`` is its wall time, ``reused`` the runs taken from the store.
A store that lacks a lesson run (or holds it without generations) is refused: the benchmark measures
the reuse path only; ``bench_lesson_class.py`` times the runs themselves.
``--browser`` also serves the app on that store, clicks the Lesson button in headless Chromium and
reports ``browser_seconds`` (click → "lesson ready" on the page); ``--screenshot`` saves the page.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from app.lesson_tab import lesson_stream
from toolkit.errors import ToolkitError
from toolkit.teach import lesson


def browser_seconds(runs: str, model: str, screenshot: str | None) -> float:
    """Click → "lesson ready" in headless Chromium on the app serving ``runs``; optionally save a screenshot."""
    from tests.helpers.browser_app import browser, open_page, serve, wait_for_text

    with serve(runs, model=model) as url, browser() as chromium:
        page = open_page(chromium, url, width=1440, height=2600)
        page.get_by_role("tab", name="Lesson").click()
        wait_for_text(page, "#lesson-plan", "Every run is in the store", timeout=60)
        start = time.perf_counter()
        page.click("#lesson-button")
        wait_for_text(page, "#lesson-status", "lesson ready", timeout=120)
        seconds = time.perf_counter() - start
        if screenshot:
            page.wait_for_timeout(1000)
            page.screenshot(path=screenshot, full_page=True)
    return seconds


def main(argv: list[str] | None = None) -> int:
    """Print one JSON object: model, runs folder, reused runs, seconds to the finished lesson, status line."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_lesson",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", default="runs", help="run store holding the four lesson runs")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--browser", action="store_true", help="also time the click in headless Chromium")
    parser.add_argument("--screenshot", default=None, help="with --browser: save the finished page as this PNG")
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
    line = {"bench": "lesson", "model": args.model, "runs": args.runs, "reused": reused,
            "seconds": round(seconds, 3), "status": final.get("status", "")}
    if args.browser:
        line["browser_seconds"] = round(browser_seconds(args.runs, args.model, args.screenshot), 3)
    print(json.dumps(line))
    return 0 if "lesson ready" in final.get("status", "") else 1


if __name__ == "__main__":
    raise SystemExit(main())
