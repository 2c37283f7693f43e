"""The Sweep tab's frontier view in a real browser, on a small store with a recovered run.

Builds a store of quick runs on ``tiny-llama`` (or ``--model``), each with its model saved and the
dense perplexity measured: Numerical Pruning 30 % of heads and channels, depth pruning of one
layer, Wanda 50 % (masks: not timed), then a recovery (LM loss, full fine-tune) of the Numerical
run. Serves the app on that store, opens the Sweep tab in headless Chromium (Playwright), takes
one screenshot of the frontier view at 1440 × 900 and prints JSON: the screenshot's path, the
summary under the figure and the points drawn.

Usage: ``python -m benchmarks.frontier_screen [--model tiny-llama] [--runs DIR] [--out assets/sweep_frontier.png]``
(``--runs`` keeps the store; by default a temporary one).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from tests.helpers.browser_app import browser, open_page, serve

OUTPUTS: tuple[dict[str, Any], ...] = (
    {"method": "numerical", "sparsity": "structured:30%", "unit": "heads+channels"},
    {"method": "depth", "sparsity": "structured:1 layer"},
    {"method": "wanda", "sparsity": "50%"},
)
QUICK = {"nsamples": 4, "seqlen": 64, "eval_seqlen": 64, "eval_windows": 4, "eval_dense": True, "save_model": True}


def build_store(runs: Path, model: str) -> dict[str, Any]:
    """The quick runs and the recovery of the first one; their labels, perplexities and speed ratios."""
    from toolkit.api import RunConfig, prune_model, recover_model
    from toolkit.figures.frontier_runs import store_frontier
    from toolkit.store.runs import list_runs

    dirs = [prune_model(RunConfig(model=model, out_dir=str(runs), **QUICK, **fields))["run_dir"] for fields in OUTPUTS]
    recover_model(run=dirs[0], steps=8, train="full", lr=1e-4, device="cpu")
    frontier = store_frontier(list_runs(runs))
    return {"points": [{"label": p.label, "ppl": p.ppl, "speed": p.speed, "bytes": p.bytes}
                       for p in frontier.points], "front": frontier.front()}


def screenshot(runs: Path, out: Path, model: str) -> dict[str, Any]:
    """Open the Sweep tab, scroll its frontier view into sight, save the screenshot; the summary's text."""
    with serve(str(runs), model=model) as url, browser() as chromium:
        page = open_page(chromium, url, 1440, 900)
        page.get_by_role("tab", name="Sweep").click()
        page.click("#sweep-frontier-refresh")
        page.wait_for_selector("#sweep-frontier .js-plotly-plot", timeout=60_000)
        page.wait_for_timeout(2500)
        page.evaluate("document.querySelector('#sweep-frontier-intro').scrollIntoView({block: 'start'})")
        page.evaluate("window.scrollBy(0, -12)")
        page.wait_for_timeout(800)
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out))
        return {"screenshot": str(out), "summary": page.inner_text("#sweep-frontier-summary")}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--runs", default=None, help="the store to build (default: a temporary folder)")
    parser.add_argument("--out", default="assets/sweep_frontier.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        runs = Path(args.runs) if args.runs else Path(scratch) / "runs"
        report = {"model": args.model, **build_store(runs, args.model)}
        report.update(screenshot(runs, Path(args.out), args.model))
    print(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
