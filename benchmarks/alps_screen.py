"""A screenshot of ALPS's solver panels in the Run tab, mid-run on the embedded model, and what they showed.

Starts the app in-process, picks ALPS in headless Debian Chromium (Playwright) with the form's default
protocol (quick: 16 × 128 calibration), clicks Run and waits until ``--linears`` linears are pruned
and the ADMM panel of the current one has ``--points`` support checks; then captures the page down to
the panels at 1440 × 900, prints the status line and the panels' titles as JSON, and cancels the run
(the rest of the model is not pruned)::

    nice -n 10 python -m benchmarks.alps_screen --out assets/dashboard_alps.png
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.dashboard_embedded import capture
from tests.helpers.browser_app import browser, dom_click, open_page, pick, serve, wait_for_text

ROOT = Path(__file__).resolve().parent.parent
VIEWPORT = (1440, 900)


def pruned_linears(page: Any) -> int:
    """The count of pruned linears the heat-map's title gives (0 before the first)."""
    found = re.search(r"(\d+) of \d+ linears", page.text_content("#run-heatmap .gtitle") or "")
    return int(found.group(1)) if found else 0


def trace_points(page: Any) -> int:
    """The points of the ADMM panel's first trace (ρ at each support check) for the linear it shows now."""
    return int(page.evaluate("() => { const p = document.querySelector('#run-lambda .js-plotly-plot'); "
                             "return p && p.data && p.data[0] && p.data[0].x ? p.data[0].x.length : 0; }"))


def titles(page: Any, element: str) -> list[str]:
    """The plot and axis titles of one figure, as the page draws them."""
    return [t.strip() for t in page.locator(f"{element} .gtitle, {element} .g-xtitle, {element} .g-ytitle, "
                                            f"{element} .g-y2title").all_text_contents() if t.strip()]


def screen(model: str, linears: int, points: int, out: Path, timeout: float) -> dict[str, Any]:
    """Run ALPS in the page until ``linears`` are pruned and the ADMM trace has ``points``; capture, report, cancel."""
    report: dict[str, Any] = {"model": model, "method": "alps"}
    with tempfile.TemporaryDirectory() as runs, serve(runs, model=model) as url, browser() as chromium:
        page = open_page(chromium, url, *VIEWPORT)
        pick(page, "run-method", "alps")
        page.wait_for_timeout(1000)
        start = time.monotonic()
        dom_click(page, "#run-button")
        deadline = start + timeout
        while pruned_linears(page) < linears or trace_points(page) < points:
            if time.monotonic() > deadline:
                raise AssertionError(f"{linears} linears not pruned in {timeout} s; status: "
                                     f"{page.inner_text('#run-status')!r}")
            time.sleep(0.5)
        page.wait_for_timeout(1000)  # the panels redraw at most twice a second: let the last snapshot land
        report["click_to_screenshot_s"] = round(time.monotonic() - start, 1)
        report["admm_trace_points"] = trace_points(page)
        report["pruned_linears"] = pruned_linears(page)
        report["status"] = page.inner_text("#run-status")
        report["solver_titles"], report["lambda_titles"] = titles(page, "#run-solver"), titles(page, "#run-lambda")
        out.parent.mkdir(parents=True, exist_ok=True)
        capture(page, out, "#run-lambda")
        report["screenshot"] = str(out.relative_to(ROOT) if out.is_relative_to(ROOT) else out)
        dom_click(page, "#cancel-button")
        wait_for_text(page, "#run-status", "cancel", timeout=120)
    return report


def main() -> None:
    """Take the screenshot and print the report."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--linears", type=int, default=3, help="pruned linears before the capture")
    parser.add_argument("--points", type=int, default=8, help="support checks drawn in the ADMM panel before it")
    parser.add_argument("--out", default=str(ROOT / "assets" / "dashboard_alps.png"))
    parser.add_argument("--timeout", type=float, default=1200.0)
    args = parser.parse_args()
    print(json.dumps(screen(args.model, args.linears, args.points, Path(args.out).resolve(), args.timeout),
                     indent=1))


if __name__ == "__main__":
    main()
