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

The docs' other screenshots, each at 1440 × 900, are subcommands:

- ``answer [--assets assets] [--extra DIR]``: the Run tab's first view (``dashboard_first_view.png``)
  and a finished default run on the embedded model (``dashboard_run.png``: Wanda 50 %, quick
  preset, from an empty store); prints the page heights, the click-to-finished time, the status
  line, the result card and where the status, card and heat-map sit at 1440 × 900 and 1280 × 720
  (``--extra`` also saves the 1280 × 720 view and the whole page there);
- ``replay RUNS_DIR RUN_ID [--out assets/runs_replay_recovery.png]``: a stored run (a recovery in the
  docs) opened and replayed in the Runs tab; prints its status line and result;
- ``overlay RUNS_DIR LABEL... [--out assets/dashboard_overlay.png] [--sweep]``: Compare overlaying the
  runs picked by their labels (``smollm2-135m · Wanda 50% · seed 0``); prints Compare's message, and
  with ``--sweep`` the Sweep tab's time estimate for one and two seeds (and saves it beside ``--out``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.dashboard_embedded import capture, cold_dense_cache, measured_run, plain_run, stored_results
from tests.helpers.browser_app import (
    browser,
    dom_click,
    first_cell_seconds,
    first_running_seconds,
    open_page,
    pick,
    serve,
    wait_for_text,
    watch_run,
)

ROOT = Path(__file__).resolve().parent.parent
TITLE = (__doc__ or "").splitlines()[0]


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
    for name in ("Wanda 50%", "SparseGPT 50%"):  # labels as Compare lists them: model · name (· seed or time)
        page.click("#compare-runs input")
        page.locator(f'li[aria-label*="· {name}"]').first.click()
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
DOCS_VIEWPORT = (1440, 900)
SCREENS = ("answer", "replay", "overlay")


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
        values = [value for sample in samples if (value := sample[key]) is not None]
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


def answer_screens(assets: Path, extra: Path | None) -> dict:
    """The Run tab before a run and after the default run on the embedded model, with where the answer sits."""
    import time

    report: dict = {"model": EMBEDDED}
    with tempfile.TemporaryDirectory() as runs, serve(runs, model=EMBEDDED) as url, browser() as chromium:
        page = open_page(chromium, url, *DOCS_VIEWPORT)
        page.wait_for_timeout(2000)
        report["page_height_before_px"] = page.evaluate("document.documentElement.scrollHeight")
        page.screenshot(path=str(assets / "dashboard_first_view.png"))
        start = time.monotonic()
        page.click("#run-button")
        wait_for_text(page, "#run-status", "✓ finished", timeout=3600)
        report["click_to_finished_s"] = round(time.monotonic() - start, 1)
        page.wait_for_timeout(2000)
        page.evaluate("window.scrollTo(0, 0)")
        report["page_height_after_px"] = page.evaluate("document.documentElement.scrollHeight")
        report["status"], report["card"] = page.inner_text("#run-status"), page.inner_text("#run-card")
        for width, height in (DOCS_VIEWPORT, (1280, 720)):
            page.set_viewport_size({"width": width, "height": height})
            page.wait_for_timeout(1000)
            page.evaluate("window.scrollTo(0, 0)")
            report[f"{width}x{height}"] = {selector: page.locator(selector).first.bounding_box() for selector in
                                           ("#run-status", "#run-card", "#run-card td strong", "#run-heatmap")}
            if (width, height) == DOCS_VIEWPORT:
                page.screenshot(path=str(assets / "dashboard_run.png"))
            elif extra is not None:
                page.screenshot(path=str(extra / f"dashboard_run_{width}x{height}.png"))
        if extra is not None:
            page.set_viewport_size(dict(zip(("width", "height"), DOCS_VIEWPORT, strict=True)))
            page.wait_for_timeout(500)
            page.screenshot(path=str(extra / "dashboard_run_full.png"), full_page=True)
    return report


def replay_screen(runs_dir: str, run_id: str, out: Path) -> dict:
    """A stored run opened and replayed in the Runs tab, its status line at the top of the view."""
    with serve(runs_dir) as url, browser() as chromium:
        page = open_page(chromium, url, *DOCS_VIEWPORT)
        page.get_by_role("tab", name="Runs").click()
        page.wait_for_selector("#runs-message:has-text('runs in')")
        pick(page, "runs-pick", run_id)
        dom_click(page, "#runs-open")
        wait_for_text(page, "#runs-status", "✓ finished", timeout=120)
        page.wait_for_selector("[id^='runs-'] .js-plotly-plot", timeout=60_000)  # its first panel drawn
        page.wait_for_timeout(1500)
        _top(page, "#runs-status")
        page.screenshot(path=str(out))
        return {"run_id": run_id, "status": page.inner_text("#runs-status"), "card": page.inner_text("#runs-card"),
                "result": page.inner_text("#runs-result")}


def overlay_screen(runs_dir: str, labels: list[str], out: Path, sweep: bool) -> dict:
    """Compare overlaying the runs picked by label; with ``sweep``, the Sweep tab's estimate for one and two seeds."""
    report: dict = {"labels": labels}
    with serve(runs_dir, model=EMBEDDED) as url, browser() as chromium:
        page = open_page(chromium, url, *DOCS_VIEWPORT)
        page.get_by_role("tab", name="Compare masks").click()
        page.click("#compare-refresh")
        page.wait_for_timeout(1500)
        for label in labels:
            pick(page, "compare-runs", label)
        page.keyboard.press("Escape")
        page.wait_for_function("() => document.querySelector('#compare-linear input').value !== ''",
                               timeout=60_000)
        page.click("#compare-button")
        wait_for_text(page, "#compare-message", "IoU", timeout=300)
        page.wait_for_selector("#compare-overlay-error .legend", timeout=60_000)
        page.wait_for_timeout(1500)
        _top(page, "#compare-runs")
        page.screenshot(path=str(out))
        report["message"] = page.inner_text("#compare-message")
        if sweep:
            page.get_by_role("tab", name="Sweep").click()
            page.wait_for_selector("#sweep-estimate")
            for seeds in ("4", "0, 1"):
                page.fill("#sweep-seeds textarea, #sweep-seeds input", seeds)
                page.keyboard.press("Tab")
                page.wait_for_timeout(2500)
                report[f"sweep_estimate_seeds_{seeds.replace(', ', '_')}"] = page.inner_text("#sweep-estimate")
            page.screenshot(path=str(out.with_name(f"{out.stem}-sweep{out.suffix}")))
    return report


def _top(page: Any, selector: str) -> None:
    """Scroll ``selector`` to the top of the view, 12 px below the edge."""
    page.evaluate(f"document.querySelector({json.dumps(selector)}).scrollIntoView({{block: 'start'}})")
    page.evaluate("window.scrollBy(0, -12)")
    page.wait_for_timeout(800)


def screens(argv: list[str]) -> dict | None:
    """The ``answer``, ``replay`` and ``overlay`` subcommands' report; None when ``argv`` names none."""
    if not argv or argv[0] not in SCREENS:
        return None
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dashboard_screens", description=TITLE)
    commands = parser.add_subparsers(dest="screen", required=True)
    answer = commands.add_parser("answer", help="the Run tab's first view and a finished default run (embedded model)")
    answer.add_argument("--assets", default=str(ROOT / "assets"))
    answer.add_argument("--extra", default=None, help="also save the 1280 × 720 view and the whole page here")
    replay = commands.add_parser("replay", help="a stored run replayed in the Runs tab")
    replay.add_argument("runs_dir")
    replay.add_argument("run_id")
    replay.add_argument("--out", default=str(ROOT / "assets" / "runs_replay_recovery.png"))
    overlay = commands.add_parser("overlay", help="Compare overlaying runs picked by their labels")
    overlay.add_argument("runs_dir")
    overlay.add_argument("labels", nargs="+", help="labels as Compare lists them: 'smollm2-135m · Wanda 50%% · seed 0'")
    overlay.add_argument("--out", default=str(ROOT / "assets" / "dashboard_overlay.png"))
    overlay.add_argument("--sweep", action="store_true", help="also the Sweep tab's estimate for one and two seeds")
    args = parser.parse_args(argv)
    if args.screen == "answer":
        extra = Path(args.extra) if args.extra else None
        for folder in (Path(args.assets), extra):
            if folder is not None:
                folder.mkdir(parents=True, exist_ok=True)
        return answer_screens(Path(args.assets), extra)
    if args.screen == "replay":
        return replay_screen(args.runs_dir, args.run_id, Path(args.out))
    return overlay_screen(args.runs_dir, args.labels, Path(args.out), args.sweep)


def main() -> int:
    import sys

    chosen = screens(sys.argv[1:])
    if chosen is not None:
        print(json.dumps(chosen, indent=2, ensure_ascii=False))
        return 0
    parser = argparse.ArgumentParser(description=TITLE,
                                     epilog="Subcommands (each with its own --help): " + ", ".join(SCREENS))
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
