"""The dashboard in headless Chromium (Debian package) driven by Playwright: run, watch, cancel.

``pytest -m browser`` runs these; ``make test`` includes them. Skipped when chromium is missing
(``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_app import (
    browser, chromium_path, first_cell_seconds, first_running_seconds, open_page, pick, serve, set_extra_options,
    status, wait_for_text, watch_run,
)

from toolkit.api import list_runs

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(chromium_path() is None, reason="needs Debian chromium: apt-get install chromium")]


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def url(runs_dir: Path) -> Iterator[str]:
    with serve(str(runs_dir)) as address:
        yield address


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with browser() as instance:
        yield instance


def test_build_app_returns_blocks(runs_dir: Path) -> None:
    import gradio as gr

    from app.app import build_app

    assert isinstance(build_app(default_model="tiny-llama", runs_dir=str(runs_dir)), gr.Blocks)


def test_run_shows_perplexity_traces_and_a_fast_first_plot(url: str, chromium: Any, runs_dir: Path) -> None:
    page = open_page(chromium, url)
    pick(page, "run-method", "fista")  # FISTAPruner with its defaults: λ and solver traces
    watch = watch_run(page)
    result = page.inner_text("#run-result")
    assert re.search(r"perplexity \(wiki.*\|?\s*\d+\.\d{3}", result.replace("\n", " ")), result
    assert page.locator("#run-solver .scatterlayer .trace").count() >= 1
    assert page.locator("#run-lambda .scatterlayer .trace").count() >= 1
    first_cell, started = first_cell_seconds(watch), first_running_seconds(watch)
    report = {"click_to_first_heatmap_cell_s": first_cell, "click_to_run_started_s": started}
    (runs_dir / "first_plot.json").write_text(json.dumps(report))
    print(f"\nclick → first heat-map cell {first_cell:.2f} s, click → run started {started:.2f} s")
    assert first_cell is not None and first_cell <= 4.0  # target ≤ 2 s on an idle machine; CI is loaded


def test_progress_moves_while_a_run_is_going(url: str, chromium: Any) -> None:
    page = open_page(chromium, url)
    pick(page, "run-method", "fista")
    # The default run on tiny-llama can be over before the 0.5 s redraw shows progress on a fast machine;
    # more outer rounds make it last seconds (about 3 s on an idle 2-core EPYC) wherever it runs.
    set_extra_options(page, "max_rounds=60\npatience=60\neps=1e-12\ntrace_every=10")
    watch = watch_run(page)
    counts = {int(m.group(1)) for _, title, _ in watch if (m := re.search(r"(\d+) of 14 linears", title or ""))}
    assert len(counts - {0, 14}) >= 1, f"the heat-map never showed a partial state: {sorted(counts)}"
    running = [text for _, _, text in watch if "▶ running" in (text or "")]
    assert any(re.search(r"layer [12] of 2", t) for t in running) and len(set(running)) >= 3, running


def test_bad_input_is_a_message_and_the_app_keeps_serving(url: str, chromium: Any) -> None:
    page = open_page(chromium, url)
    page.fill("#run-model-path textarea, #run-model-path input", "nobody/not-a-model")
    page.click("#run-button")
    text = wait_for_text(page, "#run-status", "⚠")
    assert "could not load model" in text and "Traceback" not in page.content()
    page.fill("#run-model-path textarea, #run-model-path input", "")
    page.get_by_label("n:m", exact=True).check()
    pick(page, "run-nm", "2:4")
    page.click("#run-button")
    wait_for_text(page, "#run-status", "✓ finished")


def test_cancel_marks_the_run_cancelled(url: str, chromium: Any, runs_dir: Path) -> None:
    page = open_page(chromium, url)
    pick(page, "run-method", "fista")
    set_extra_options(page, "max_rounds=100000\npatience=100000\neps=1e-12")  # slow enough to cancel
    before = {r.run_id for r in list_runs(runs_dir)}
    page.click("#run-button")
    wait_for_text(page, "#run-status", "▶ running")
    time.sleep(0.5)
    # a DOM click, as a user's: Playwright's synthetic pointer input can wait out its 30 s timeout for a
    # renderer starved by the solver on a 2-core machine
    page.evaluate("document.querySelector('#cancel-button').click()")
    text = wait_for_text(page, "#run-status", "cancelled", timeout=60)
    assert "■ cancelled" in text
    (new,) = [r for r in list_runs(runs_dir) if r.run_id not in before]
    deadline = time.monotonic() + 30
    while new.status != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.2)
        (new,) = [r for r in list_runs(runs_dir) if r.run_id == new.run_id]
    assert new.status == "cancelled"
    assert status(page) and "Traceback" not in page.content()
