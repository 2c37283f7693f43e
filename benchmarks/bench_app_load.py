"""The app under load: five browser sessions submit runs at once; how fast does a fresh page load meanwhile?

Starts the app in-process (tiny-llama, engine imports warmed first, the queue as ``python -m app`` sets
it), opens one headless Debian Chromium with five contexts (five sessions), clicks Run in all five
within a second, then loads fresh pages (goto until the Run button is visible) for as long as runs
wait in the queue, and waits for all five runs to finish. With ``--submit server`` the five sessions
are submitted in the server process instead (``app.run_tab.run_stream``, the handler behind Run, one
thread per session), so no live page shares the machine with the fresh one: the server's own
responsiveness. Prints JSON:

- ``page_load_idle_s``: fresh page loads before any run (the machine's baseline);
- ``page_load_s``: each fresh page's navigation → visible Run button, while runs queued;
- ``document_s``: the same loads' navigation → HTML received (the server's part);
- ``positions_seen``: the queue positions the five status lines showed right after the clicks;
- ``all_finished``: every session's status line reached "finished", and the run store holds
  ``sessions`` finished runs (``store_finished``).

Usage: ``python -m benchmarks.bench_app_load [--sessions 5] [--method fista] [--nsamples 64] [--loads 5]
[--submit browser|server]``
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from app import forms, run_tab
from tests.helpers.browser_app import (
    browser,
    dom_click,
    enter,
    page_load_seconds,
    pick,
    serve,
    session_page,
)
from toolkit.store.runs import list_runs

ROOT = Path(__file__).resolve().parent.parent


def browser_sessions(chromium: object, url: str, args: argparse.Namespace) -> Callable[[], list[str]]:
    """Five pages click Run; returns a function reading their status lines."""
    pages = [session_page(chromium, url) for _ in range(args.sessions)]
    for page in pages:
        pick(page, "run-method", args.method)
        page.get_by_text("Calibration, evaluation, device").click()
        enter(page, "#run-nsamples input", str(args.nsamples))
    for page in pages:
        dom_click(page, "#run-button")
    return lambda: [page.inner_text("#run-status") for page in pages]


def server_sessions(runs: str, args: argparse.Namespace) -> Callable[[], list[str]]:
    """Five sessions follow their runs in server threads; returns a function reading their last status."""
    last = [""] * args.sessions
    settings = forms.RunSettings(model="tiny-llama", method=args.method,
                                 protocol=forms.Protocol(nsamples=args.nsamples))

    def follow(index: int) -> None:
        for update in run_tab.run_stream(settings, runs_dir=runs, session=f"bench-{index}"):
            last[index] = str(update.get("status", last[index]))

    for index in range(args.sessions):
        threading.Thread(target=follow, args=(index,), daemon=True).start()
    return lambda: list(last)


def _position(status: str) -> int | None:
    found = re.search(r"queued.*?position (\d+)", status)
    return int(found.group(1)) if found else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--method", default="fista", help="method of the five runs (fista: long enough to queue)")
    parser.add_argument("--nsamples", type=int, default=64, help="calibration samples per run (longer queue)")
    parser.add_argument("--loads", type=int, default=5, help="most fresh page loads measured while runs queue")
    parser.add_argument("--submit", choices=("browser", "server"), default="browser",
                        help="who submits the runs: five live pages, or five sessions in the server process")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for every run to finish")
    args = parser.parse_args()
    if args.sessions < 2 or args.loads < 1:
        print("error: --sessions must be ≥ 2 (a queue needs two runs) and --loads ≥ 1", file=sys.stderr)
        return 2
    loads: list[tuple[float, float]] = []
    positions: set[int] = set()
    with tempfile.TemporaryDirectory() as runs, serve(runs) as url, browser() as chromium:
        idle = [page_load_seconds(chromium, url)[0] for _ in range(args.loads)]
        read = browser_sessions(chromium, url, args) if args.submit == "browser" else server_sessions(runs, args)
        for _ in range(20):  # the places in line, before the queue moves on
            positions.update(p for p in map(_position, read()) if p is not None)
            if len(positions) >= args.sessions - 1:
                break
            time.sleep(0.25)
        deadline = time.monotonic() + args.timeout
        statuses = [""] * args.sessions
        while time.monotonic() < deadline:
            statuses = read()
            queued = [_position(status) for status in statuses]
            positions.update(p for p in queued if p is not None)
            if all("finished" in s or "⚠" in s or "failed" in s for s in statuses):
                break
            if any(p is not None for p in queued) and len(loads) < args.loads:
                loads.append(page_load_seconds(chromium, url))
            else:
                time.sleep(0.5)
        records = list_runs(runs)
    totals = [round(total, 3) for total, _ in loads]
    report = {
        "sessions": args.sessions, "submit": args.submit, "model": "tiny-llama", "method": args.method,
        "nsamples": args.nsamples,
        "page_load_idle_s": [round(v, 3) for v in idle],
        "page_load_s": totals, "page_load_median_s": round(statistics.median(totals), 3) if totals else None,
        "document_s": [round(document, 3) for _, document in loads],
        "positions_seen": sorted(positions),
        "all_finished": all("✓ finished" in s for s in statuses),
        "store_finished": sum(r.status == "finished" for r in records), "store_runs": len(records),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
