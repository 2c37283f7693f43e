"""A PNG of AWP's solver panels for a stored quantize-only run, as the app's Runs tab draws them.

Serves the app on the run store ``RUNS_DIR`` (in-process, headless Debian Chromium via Playwright, the
helpers of ``tests/helpers/browser_app.py``), opens and replays ``RUN_ID`` in the Runs tab, and saves
the solver-trace row (convergence with ‖C‖_F/‖C‖₂ in its title, and the projection trace: distance
moved by Proj_INT, codes changed from round-to-nearest, bits) of the linear ``--linear`` (default: the
last one). Prints one JSON line: the run, the linear shown, the panels' titles.

    python -m benchmarks.bench_awp_screen RUNS_DIR RUN_ID --out docs/methods/awp_quant_panel.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tests.helpers.browser_app import browser, dom_click, open_page, pick, serve, wait_for_text


def capture(runs_dir: str, run_id: str, out: Path, linear: str | None) -> dict:
    """Replay ``run_id`` in the Runs tab and screenshot its solver-trace row."""
    with serve(runs_dir) as url, browser() as chromium:
        page = open_page(chromium, url, 1440, 900)
        page.get_by_role("tab", name="Runs").click()
        page.wait_for_selector("#runs-message:has-text('runs in')")
        pick(page, "runs-pick", run_id)
        dom_click(page, "#runs-open")
        wait_for_text(page, "#runs-status", "✓ finished", timeout=300)
        page.wait_for_selector("#runs-section-trace .js-plotly-plot", timeout=120_000)
        if linear:
            pick(page, "runs-trace", linear)
            page.wait_for_timeout(3000)
        page.wait_for_timeout(2000)
        row = page.locator("#runs-section-trace")
        row.scroll_into_view_if_needed()
        row.screenshot(path=str(out))
        titles = [t.text_content() for t in page.locator("#runs-section-trace .gtitle").all()]
        return {"benchmark": "awp_screen", "run_id": run_id, "linear": linear, "titles": titles, "png": str(out)}


def main() -> None:
    """Save the PNG and print what it shows."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs_dir")
    parser.add_argument("run_id")
    parser.add_argument("--linear", default=None, help="the trace picker's entry, e.g. '3 · self_attn.q_proj'")
    parser.add_argument("--out", default="docs/methods/awp_quant_panel.png")
    args = parser.parse_args()
    print(json.dumps(capture(args.runs_dir, args.run_id, Path(args.out), args.linear)), flush=True)


if __name__ == "__main__":
    main()
