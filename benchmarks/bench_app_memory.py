"""The app over a school day: its resident memory after each of N runs of the default job.

Serves the app in this process (:func:`tests.helpers.browser_app.serve`, the embedded model as the
default, engine imports warmed first), then runs the default job (Wanda 50 %, the quick preset, the
page's defaults) N times, one after the other. ``--via page`` (the default) clicks Run in headless
Debian Chromium, one fresh browser context per run (a separate session), closed once the status line
says finished, as a class would; ``--via handler`` calls :func:`app.run_tab.run_stream`, the
handler's logic behind the Run button, in this process. After each run (and a short settle) it
samples this process's resident memory (psutil): the server's, since the app is served in-process.

Prints one JSON object:

- ``rss_start_mib``: the server before any run (page loaded once);
- ``rss_mib``: after each run; ``live_models``: language models still reachable after each run
  (gc.collect() first; 0 when a finished run's model was released);
- ``growth_mib``: ``rss_mib[-1] - rss_mib[0]`` (run 1 to the last run measured); ``goal_mib`` the
  bound the app must stay within (1 GiB above its memory after the first run) and ``within_goal``;
- ``runs_done`` of ``runs``: the ``--json`` file is rewritten after every run, so a measurement cut
  short still says how far it got.

Usage: ``python -m benchmarks.bench_app_memory [--runs 20] [--via page|handler] [--json FILE]``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from app import forms, run_tab
from tests.helpers.browser_app import browser, dom_click, serve, session_page, wait_for_text
from toolkit.models.sources import EMBEDDED
from toolkit.run.protocols import QUICK

GOAL_MIB = 1024  # memory after run N within 1 GiB of the memory after run 1
SETTLE_S = 2.0  # after a run: the page closed, the worker threads ended


def rss_mib() -> float:
    """The resident memory of this process in MiB."""
    return psutil.Process(os.getpid()).memory_info().rss / 2**20


def live_models() -> int:
    """Language models still reachable from somewhere in this process (after a full collection)."""
    from transformers import PreTrainedModel

    gc.collect()
    return sum(1 for obj in gc.get_objects() if isinstance(obj, PreTrainedModel))


def run_page(chromium: Any, url: str, timeout: float) -> str:
    """One default run through the page, in a fresh browser context closed afterwards; the final status."""
    page = session_page(chromium, url)
    try:
        dom_click(page, "#run-button")
        return wait_for_text(page, "#run-status", "✓ finished", timeout=timeout)
    finally:
        page.context.close()


def run_handler(runs_dir: str, index: int) -> str:
    """One default run through the Run button's handler logic; the final status."""
    last = ""
    settings = forms.RunSettings(model=EMBEDDED)  # the form's defaults: Wanda 50 %, the quick preset
    for update in run_tab.run_stream(settings, runs_dir=runs_dir, session=f"bench-memory-{index}"):
        last = str(update.get("status", last))
    return last


def report(args: argparse.Namespace, start: float, rss: list[float], live: list[int],
           seconds: list[float]) -> dict[str, Any]:
    """The JSON object for the runs measured so far (``runs_done`` of ``runs``)."""
    growth = round(rss[-1] - rss[0], 1)
    return {
        "benchmark": "app_memory", "via": args.via, "model": EMBEDDED, "method": "wanda", "sparsity": "50%",
        "protocol": QUICK.label, "runs": args.runs, "runs_done": len(rss), "cpus": os.cpu_count(),
        "rss_start_mib": round(start, 1), "rss_mib": rss, "live_models": live, "run_seconds": seconds,
        "growth_mib": growth, "growth_per_run_mib": round(growth / max(1, len(rss) - 1), 1),
        "goal_mib": GOAL_MIB, "within_goal": growth <= GOAL_MIB,
    }


def write(line: str, path: str) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(line + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--via", choices=("page", "handler"), default="page",
                        help="click Run in headless Chromium, or call the Run handler's logic in the server")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one run may take")
    parser.add_argument("--json", default="",
                        help="also write the JSON object to this file (rewritten after every run: see runs_done)")
    args = parser.parse_args()
    if args.runs < 1:
        print("error: --runs must be ≥ 1", file=sys.stderr)
        return 2
    rss: list[float] = []
    live: list[int] = []
    seconds: list[float] = []
    with tempfile.TemporaryDirectory() as runs, serve(runs, model=EMBEDDED) as url, browser() as chromium:
        session_page(chromium, url).context.close()  # the page served once: the server's own baseline
        time.sleep(SETTLE_S)
        start = rss_mib()
        for index in range(args.runs):
            began = time.monotonic()
            final = run_page(chromium, url, args.timeout) if args.via == "page" else run_handler(runs, index)
            if "finished" not in final:
                print(f"error: run {index + 1} did not finish: {final[:200]!r}", file=sys.stderr)
                return 1
            seconds.append(round(time.monotonic() - began, 1))
            time.sleep(SETTLE_S)
            live.append(live_models())
            rss.append(round(rss_mib(), 1))
            print(f"run {index + 1}/{args.runs}: {rss[-1]:.0f} MiB, {live[-1]} live models, {seconds[-1]} s",
                  file=sys.stderr, flush=True)
            write(json.dumps(report(args, start, rss, live, seconds)), args.json)
    line = json.dumps(report(args, start, rss, live, seconds))
    print(line, flush=True)
    write(line, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
