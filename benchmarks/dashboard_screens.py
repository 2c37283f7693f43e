"""Dashboard latency and screenshots: click-to-first-plot, PNGs of Run, Sweep, Compare.

Starts the app in-process (engine imports warmed first, as ``python -m app`` does), drives it in
headless Debian Chromium with Playwright, and prints JSON:

- ``click_to_run_started_s``: click → the page shows the run started (model loaded, grid laid out);
- ``click_to_first_heatmap_cell_s``: click → the heat-map shows its first pruned linear.

On ``tiny-llama`` (the default) the clicks are repeated and the Run view is captured finished. On the
embedded model (``--model smollm2-135m``) one Wanda run is measured (also click → first phase text
and the status line 1 s after the click), the Run view is captured mid-run and Compare on that run
and a SparseGPT run of the same protocol (:mod:`benchmarks.dashboard_embedded`).

Usage: ``python -m benchmarks.dashboard_screens [--model tiny-llama] [--repeats 5] [--assets assets]
[--no-screens] [--nsamples N] [--cold-dense] [--out result.json]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks.dashboard_embedded import capture, cold_dense_cache, measured_run, plain_run, stored_results
from tests.helpers.browser_app import (
    browser,
    first_cell_seconds,
    first_running_seconds,
    open_page,
    pick,
    serve,
    wait_for_text,
    watch_run,
)

ROOT = Path(__file__).resolve().parent.parent


def measure(chromium: object, url: str, method: str) -> dict[str, float | None]:
    """One Run click on a fresh page; seconds to the first updates."""
    page = open_page(chromium, url)
    pick(page, "run-method", method)
    watch = watch_run(page)
    page.close()
    return {"run_started": first_running_seconds(watch), "first_cell": first_cell_seconds(watch)}


def run_screen(chromium: object, url: str, assets: Path) -> None:
    page = open_page(chromium, url, height=1300)
    pick(page, "run-method", "fista")
    page.click("#run-button")
    wait_for_text(page, "#run-status", "✓ finished")
    page.wait_for_timeout(800)
    page.screenshot(path=str(assets / "dashboard_run.png"), full_page=True)
    page.close()


def sweep_screen(chromium: object, url: str, assets: Path) -> None:
    page = open_page(chromium, url, height=1100)
    page.get_by_role("tab", name="Sweep").click()
    page.click("#sweep-button")
    wait_for_text(page, "#sweep-status", "sweep done", timeout=600)
    page.wait_for_timeout(800)
    page.screenshot(path=str(assets / "dashboard_sweep.png"), full_page=True)
    page.close()


def compare_screen(chromium: object, url: str, assets: Path, compact: bool = False) -> None:
    page = open_page(chromium, url, height=1100)
    page.get_by_role("tab", name="Compare masks").click()
    page.click("#compare-refresh")
    page.wait_for_timeout(500)
    for label in ("wanda 50%", "sparsegpt 50%"):
        page.click("#compare-runs input")
        page.locator(f'li[aria-label*="· {label} ·"]').first.click()
    page.keyboard.press("Escape")
    page.wait_for_timeout(800)
    page.click("#compare-button")
    wait_for_text(page, "#compare-message", "IoU", timeout=60)
    page.wait_for_timeout(1000)
    if compact:  # down to the difference image: the panels the README shows
        capture(page, assets / "dashboard_compare.png", "#compare-difference")
    else:
        page.screenshot(path=str(assets / "dashboard_compare.png"), full_page=True)
    page.close()


EMBEDDED = "smollm2-135m"


def tiny_report(args: argparse.Namespace, assets: Path) -> dict:
    """Repeated clicks on tiny-llama, then the Run (finished), Sweep and Compare screenshots."""
    with tempfile.TemporaryDirectory() as runs, serve(runs) as url, browser() as chromium:
        samples = [measure(chromium, url, args.method) for _ in range(args.repeats)]
        if not args.no_screens:
            run_screen(chromium, url, assets)
            sweep_screen(chromium, url, assets)
            compare_screen(chromium, url, assets)
    report = {"model": "tiny-llama", "method": args.method, "repeats": args.repeats}
    for key in ("run_started", "first_cell"):
        values = [s[key] for s in samples if s[key] is not None]
        # a run that ends between two refreshes never shows "running": counted as not seen, not as a time
        report[f"click_to_{'run_started' if key == 'run_started' else 'first_heatmap_cell'}_s"] = {
            "median": round(statistics.median(values), 3) if values else None,
            "max": round(max(values), 3) if values else None,
            "all": [round(v, 3) for v in values], "not_seen": len(samples) - len(values)}
    return report


def embedded_report(args: argparse.Namespace, assets: Path) -> dict:
    """One measured Wanda click on the embedded model (Run captured mid-run), a SparseGPT run, Compare."""
    import contextlib
    import os

    protocol = "app default (quick: 8 × 128 calibration tokens, 16 eval windows of 128)" if args.nsamples is None \
        else f"quick preset with nsamples {args.nsamples} (× 128 calibration tokens, 16 eval windows of 128)"
    cache = cold_dense_cache() if args.cold_dense else contextlib.nullcontext()
    with cache, tempfile.TemporaryDirectory() as runs, serve(runs, model=args.model) as url, browser() as chromium:
        screen = None if args.no_screens else assets / "dashboard_run.png"
        measured = measured_run(chromium, url, args.method, args.nsamples, screen)
        if not args.no_screens:
            plain_run(chromium, url, "sparsegpt", args.nsamples)
            compare_screen(chromium, url, assets, compact=True)
        runs_stored = stored_results(runs)
    return {"model": args.model, "method": args.method, "protocol": protocol,
            "dense_perplexity": "evaluated (cache emptied)" if args.cold_dense else "as cached on this machine",
            "threads": os.environ.get("OMP_NUM_THREADS", "unset"), **measured, "runs": runs_stored}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-llama", choices=("tiny-llama", EMBEDDED))
    parser.add_argument("--repeats", type=int, default=5, help="clicks measured (tiny-llama)")
    parser.add_argument("--method", default="wanda", help="method of the latency runs")
    parser.add_argument("--assets", default=str(ROOT / "assets"))
    parser.add_argument("--no-screens", action="store_true")
    parser.add_argument("--nsamples", type=int, default=None, help="calibration samples (default: the app's preset)")
    parser.add_argument("--cold-dense", action="store_true", help="evaluate the dense model (no cached perplexity)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    if args.nsamples is not None and args.nsamples < 1:
        parser.error("--nsamples must be at least 1")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    assets = Path(args.assets)
    assets.mkdir(parents=True, exist_ok=True)
    report = embedded_report(args, assets) if args.model == EMBEDDED else tiny_report(args, assets)
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
