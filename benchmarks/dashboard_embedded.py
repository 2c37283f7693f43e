"""The dashboard on the embedded model: click → first phase text / run started / first heat-map cell, screenshots.

One Wanda run is clicked in headless Chromium with every change of the status line and the heat-map
title recorded from the click (:data:`browser_app.WATCH_JS`); the status line is also read 1 s after
the click. When a share of the linears is pruned the Run view is captured mid-run; then a SparseGPT
run with the same protocol follows, and Compare is captured on the two (tile zoom at native
resolution and the four-colour difference image). Used by ``benchmarks/dashboard_screens.py --model``.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.helpers.browser_app import (
    WATCH_JS,
    enter,
    first_cell_seconds,
    first_running_seconds,
    open_page,
    pick,
    recorded,
    wait_for_text,
)

IDLE = "Pick a model, a method and a sparsity, then **Run**."
MID_RUN_SHARE = 0.4  # the Run screenshot is taken once this share of the linears is pruned
RUN_TIMEOUT = 3600.0  # seconds one run of the embedded model may take on a loaded CPU


@contextmanager
def cold_dense_cache() -> Iterator[Path]:
    """``$PRUNELAB_CACHE`` pointed at a copy of the cache without the cached dense perplexities.

    The converted checkpoint and the tokenised text are linked, not copied; only ``dense_ppl.json``
    is left out, so the run evaluates the dense model as a first run of a protocol does.
    """
    from toolkit.models.sources import cache_dir

    source, previous = cache_dir(), os.environ.get("PRUNELAB_CACHE")
    with tempfile.TemporaryDirectory(prefix="prunelab-cache-") as folder:
        for entry in source.iterdir() if source.exists() else ():
            if entry.name != "dense_ppl.json":
                (Path(folder) / entry.name).symlink_to(entry)
        os.environ["PRUNELAB_CACHE"] = folder
        try:
            yield Path(folder)
        finally:
            if previous is None:
                os.environ.pop("PRUNELAB_CACHE", None)
            else:
                os.environ["PRUNELAB_CACHE"] = previous


def set_nsamples(page: Any, nsamples: int | None) -> None:
    """Type ``nsamples`` into the protocol accordion (None: keep the app's default protocol)."""
    if nsamples is None:
        return
    page.get_by_text("Calibration, evaluation, device").click()
    enter(page, "#run-nsamples input", str(nsamples))


def linears_done(page: Any) -> tuple[int, int]:
    """``(pruned, total)`` linears from the heat-map title (0, 0 before the grid is laid out)."""
    title = page.text_content("#run-heatmap .gtitle") or ""
    found = re.search(r"(\d+) of (\d+) linears", title)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def first_phase(watch: list[list[Any]]) -> tuple[float | None, str]:
    """Seconds from the click to the first status text other than the idle one, and that text."""
    for when, _, text in watch:
        if text and text.strip() and IDLE.replace("**", "") not in text:
            return when / 1000.0, text.strip()
    return None, ""


def status_at(watch: list[list[Any]], seconds: float) -> str:
    """The status text shown ``seconds`` after the click (page clock): the last change recorded by then."""
    shown = [text for when, _, text in watch if when / 1000.0 <= seconds and text]
    return shown[-1].strip() if shown else ""


def capture(page: Any, path: Path, bottom: str) -> None:
    """Screenshot the app's column (no side margins) from the top down to ``bottom``'s lower edge."""
    column = page.locator("div.tabs").first.bounding_box()
    last = page.locator(bottom).first.bounding_box()
    page.screenshot(path=str(path), full_page=True,
                    clip={"x": column["x"] - 10, "y": 0, "width": column["width"] + 20, "height": last["y"] +
                          last["height"] + 12})


def timeline(watch: list[list[Any]], until: float) -> list[list[Any]]:
    """``[seconds, phase line]`` each time the status line's phase (its last line) changed, up to ``until`` s."""
    rows: list[list[Any]] = []
    for when, _, text in watch:
        if when / 1000.0 > until or not text:
            continue
        line = re.sub(r"elapsed .*$|\d+(\.\d+)? s left.*$|about .*$", "", text.strip().splitlines()[-1]).strip(" ·")
        if not rows or rows[-1][1] != line:
            rows.append([round(when / 1000.0, 2), line])
    return rows


def measured_run(chromium: Any, url: str, method: str, nsamples: int | None, screen: Path | None) -> dict:
    """Click Run on the embedded model, record the first updates, capture the page mid-run, wait for the end."""
    page = open_page(chromium, url, width=1500, height=1300)
    pick(page, "run-method", method)
    set_nsamples(page, nsamples)
    page.evaluate(WATCH_JS)  # clicks Run
    clicked = time.monotonic()
    time.sleep(max(0.0, 1.0 - (time.monotonic() - clicked)))
    read_late = page.inner_text("#run-status").strip()  # on a busy renderer this read can come seconds late
    mid: dict[str, Any] = {}
    deadline = clicked + RUN_TIMEOUT
    while time.monotonic() < deadline and "✓ finished" not in page.inner_text("#run-status"):
        done, total = linears_done(page)
        if screen is not None and not mid and total and done >= MID_RUN_SHARE * total:
            page.wait_for_timeout(600)  # let the redraw that carried this count settle
            capture(page, screen, "#run-layers")
            done, total = linears_done(page)
            mid = {"seconds_after_click": round(time.monotonic() - clicked, 1), "linears": f"{done} of {total}",
                   "status": page.inner_text("#run-status").strip()}
        time.sleep(0.5)
    wait_for_text(page, "#run-status", "✓ finished", timeout=10)
    if screen is not None and not mid:
        mid = {"not_taken": f"the run finished before {MID_RUN_SHARE:.0%} of its linears were seen pruned"}
    watch = recorded(page)
    page.close()
    phase_s, phase_text = first_phase(watch)
    first_cell = first_cell_seconds(watch)
    return {"click_to_first_phase_text_s": phase_s, "first_phase_text": phase_text,
            "status_1s_after_click": status_at(watch, 1.0), "status_read_after_1s_sleep": read_late,
            "click_to_run_started_s": first_running_seconds(watch),
            "click_to_first_heatmap_cell_s": first_cell, "click_to_finished_s": round(watch[-1][0] / 1000.0, 1),
            "phases_until_first_cell": timeline(watch, first_cell or 0.0), "mid_run_screenshot": mid}


def plain_run(chromium: Any, url: str, method: str, nsamples: int | None) -> None:
    """A second run (same protocol) through the page, to the end."""
    page = open_page(chromium, url)
    pick(page, "run-method", method)
    set_nsamples(page, nsamples)
    page.click("#run-button")
    wait_for_text(page, "#run-status", "✓ finished", timeout=RUN_TIMEOUT)
    page.close()


def stored_results(runs_dir: str) -> list[dict[str, Any]]:
    """What the run store says of the runs: method, protocol, perplexities, prune time, dense cache hit."""
    from toolkit.api import list_runs

    rows = []
    for record in reversed(list_runs(runs_dir)):
        result = record.result if isinstance(record.result, dict) else {}
        rows.append({"run_id": record.run_id, "method": record.config.get("method"),
                     "nsamples": record.config.get("nsamples"), "seqlen": record.config.get("seqlen"),
                     "eval_windows": record.config.get("eval_windows"), "ppl": result.get("ppl"),
                     "dense_ppl": result.get("dense_ppl"), "dense_ppl_cached": result.get("dense_ppl_cached"),
                     "prune_seconds": result.get("prune_seconds")})
    return rows
