"""Dashboard latency and screenshots: click-to-first-plot on tiny-llama, PNGs of Run, Sweep, Compare.

Starts the app in-process on tiny-llama (engine imports warmed first, as ``python -m app`` does),
drives it in headless Debian Chromium with Playwright, and prints JSON:

- ``click_to_run_started_s``: click → the page shows the run started (model loaded, grid laid out);
- ``click_to_first_heatmap_cell_s``: click → the heat-map shows its first pruned linear.

Usage: ``python benchmarks/dashboard_screens.py [--repeats 5] [--assets assets] [--no-screens]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from browser_app import (  # noqa: E402
    browser,
    first_cell_seconds,
    first_running_seconds,
    open_page,
    pick,
    serve,
    wait_for_text,
    watch_run,
)


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


def compare_screen(chromium: object, url: str, assets: Path) -> None:
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
    page.screenshot(path=str(assets / "dashboard_compare.png"), full_page=True)
    page.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--method", default="wanda", help="method of the latency runs")
    parser.add_argument("--assets", default=str(ROOT / "assets"))
    parser.add_argument("--no-screens", action="store_true")
    args = parser.parse_args()
    assets = Path(args.assets)
    assets.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as runs, serve(runs) as url, browser() as chromium:
        samples = [measure(chromium, url, args.method) for _ in range(args.repeats)]
        if not args.no_screens:
            run_screen(chromium, url, assets)
            sweep_screen(chromium, url, assets)
            compare_screen(chromium, url, assets)
    report = {"model": "tiny-llama", "method": args.method, "repeats": args.repeats}
    for key in ("run_started", "first_cell"):
        values = [s[key] for s in samples if s[key] is not None]
        report[f"click_to_{'run_started' if key == 'run_started' else 'first_heatmap_cell'}_s"] = {
            "median": round(statistics.median(values), 3), "max": round(max(values), 3),
            "all": [round(v, 3) for v in values]}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
