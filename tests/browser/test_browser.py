"""The dashboard in headless Chromium (Debian package) driven by Playwright: run, watch, cancel.

``pytest -m browser`` runs these; ``make test`` includes them. Skipped when chromium is missing
(``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser_app import (
    WATCH_JS,
    Gate,
    chromium_path,
    enter,
    first_cell_seconds,
    first_running_seconds,
    open_page,
    pick,
    recorded,
    serve,
    status,
    wait_for_linears,
    wait_for_text,
)
from tests.helpers.gate import EvalGate
from toolkit.api import list_runs

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(chromium_path() is None, reason="needs Debian chromium: apt-get install chromium")]


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def url(runs_dir: Path, gate: Gate) -> Iterator[str]:
    with serve(str(runs_dir)) as address:
        yield address


def test_build_app_returns_blocks(runs_dir: Path) -> None:
    import gradio as gr

    from app.app import build_app

    assert isinstance(build_app(default_model="tiny-llama", runs_dir=str(runs_dir)), gr.Blocks)


def test_run_shows_perplexity_traces_and_a_fast_first_plot(url: str, chromium: Any, runs_dir: Path, held: Gate) -> None:
    page = open_page(chromium, url)
    pick(page, "run-method", Gate.NAME)  # FISTAPruner with its defaults: λ and solver traces
    held.release(1)  # the first linear may go at once; the run then waits at the second
    page.evaluate(WATCH_JS)
    wait_for_linears(page, 1)  # the first cell is drawn while the run is held: live, whatever the speed
    assert "▶ running" in status(page)
    held.open()
    wait_for_text(page, "#run-status", "✓ finished")
    watch = recorded(page)
    result = page.inner_text("#run-result")
    assert re.search(r"perplexity \(wiki.*\|?\s*\d+\.\d{3}", result.replace("\n", " ")), result
    assert "bits per weight" in result
    assert page.locator("#run-solver .scatterlayer .trace").count() >= 1
    assert page.locator("#run-lambda .scatterlayer .trace").count() >= 1
    first_cell, started = first_cell_seconds(watch), first_running_seconds(watch)
    report = {"click_to_first_heatmap_cell_s": first_cell, "click_to_run_started_s": started}
    (runs_dir / "first_plot.json").write_text(json.dumps(report))  # measured, not asserted: it is the machine's
    print(f"\nclick → first heat-map cell {first_cell:.2f} s, click → run started {started:.2f} s")
    finished_at = next(when for when, _, text in watch if "✓ finished" in (text or ""))
    assert first_cell is not None and first_cell * 1000 < finished_at  # drawn before the end, not only in it


def test_progress_moves_while_a_run_is_going(url: str, chromium: Any, held: Gate) -> None:
    page = open_page(chromium, url)
    pick(page, "run-method", Gate.NAME)
    page.evaluate(WATCH_JS)
    for done in (1, 2, 3):  # one linear at a time: the page must show each partial state
        held.release(1)
        wait_for_linears(page, done)
        wait_for_text(page, "#run-status", f"{done / 14:.0%} of linears")
        assert "▶ running" in status(page) and "layer 0 · 0 of 2 layers done" in status(page)
    held.open()
    wait_for_text(page, "#run-status", "✓ finished")
    wait_for_linears(page, 14)  # the final heat-map travels with the final status; plotly may draw it just after
    watch = recorded(page)
    counts = {int(m.group(1)) for _, title, _ in watch if (m := re.search(r"(\d+) of 14 linears", title or ""))}
    assert {1, 2, 3} <= counts and 14 in counts, sorted(counts)
    running = [text for _, _, text in watch if "▶ running" in (text or "")]
    assert len(set(running)) >= 3, running


def test_bad_input_is_a_message_and_the_app_keeps_serving(url: str, chromium: Any) -> None:
    page = open_page(chromium, url)
    enter(page, "#run-model-path textarea, #run-model-path input", "nobody/not-a-model")
    page.keyboard.press("Escape")  # the Tab that left the field opened the Method list over the Run button
    page.click("#run-button")
    text = wait_for_text(page, "#run-status", "⚠")
    assert "needs the hub" in text and "Traceback" not in page.content()
    enter(page, "#run-model-path textarea, #run-model-path input", "")
    page.keyboard.press("Escape")
    page.get_by_label("n:m", exact=True).check()
    pick(page, "run-nm", "2:4")
    page.click("#run-button")
    wait_for_text(page, "#run-status", "✓ finished")


def test_cancel_marks_the_run_cancelled(url: str, chromium: Any, runs_dir: Path, held: Gate) -> None:
    page = open_page(chromium, url)
    pick(page, "run-method", Gate.NAME)  # held before its first linear until cancelled
    before = {r.run_id for r in list_runs(runs_dir)}
    page.click("#run-button")
    wait_for_text(page, "#run-status", "▶ running")
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


# every stage ticks once as it starts (0 done), where the gate holds it
STAGES = ("evaluating dense · window 0/16", "zero-shot rte (dense) ·", "generating dense · prompt 0/5",
          "evaluating pruned · window 0/16", "zero-shot rte (pruned) ·", "generating pruned · prompt 0/5")


def test_status_line_moves_during_dense_and_pruned_evaluation(url: str, chromium: Any, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import toolkit.run.pipeline

    monkeypatch.setenv("PRUNELAB_CACHE", str(tmp_path))  # nothing cached: the dense evaluation runs
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    stages = EvalGate()
    monkeypatch.setattr(toolkit.run.pipeline, "ProgressEvents", stages.progress_class())
    safety = threading.Timer(120, stages.open)  # a page that never shows a stage fails instead of hanging
    safety.start()
    try:
        page = open_page(chromium, url)
        page.get_by_text("Calibration, evaluation, device").click()
        pick(page, "run-tasks", "rte")
        enter(page, "#run-task-limit input", "2")
        page.locator("#run-generate input").check()
        page.evaluate(WATCH_JS)
        for stage in STAGES:  # each stage is held at its first tick until the page showed it
            text = wait_for_text(page, "#run-status", stage, timeout=60)
            assert "▶ running" in text and "elapsed" in text
            stages.release()
        wait_for_text(page, "#run-status", "✓ finished")
    finally:
        safety.cancel()
        stages.open()
    assert [what for _, what in stages.held] == ["perplexity", "rte", "generation"] * 2
    result = page.inner_text("#run-result")
    assert "Zero-shot accuracy" in result and re.search(r"rte\s+validation\s+acc\s+2", result), result
    panel = page.inner_text("#run-generations")
    assert panel.count("tokens/s") == 10 and "dense" in panel and "pruned" in panel
    texts = page.locator("#run-generations td.gen-text pre")
    assert texts.count() == 10 and all(texts.nth(i).inner_text() for i in range(2))


def test_a_structured_run_shows_the_ranking_and_kept_panels(url: str, chromium: Any) -> None:
    page = open_page(chromium, url, height=1800)
    pick(page, "run-method", "numerical")  # structured is its only pattern: the slider's 50% of the units
    page.wait_for_selector("#run-unit input")
    pick(page, "run-unit", "heads+channels")
    page.click("#run-button")
    wait_for_text(page, "#run-status", "✓ finished")
    # the last figures travel in the final update, which can land just after a tick's "finished" status
    page.wait_for_function("() => /removed/.test(document.querySelector('#run-ranking .gtitle')?.textContent)",
                           timeout=30_000)
    ranking_title = page.text_content("#run-ranking .gtitle") or ""
    assert re.search(r"removed \d+ of \d+ heads, \d+ of \d+ channels", ranking_title), ranking_title
    assert page.locator("#run-ranking .scatterlayer .trace").count() == 2  # heads and channels, coloured apart
    assert page.locator("#run-ranking .shapelayer path").count() >= 1  # the threshold line
    assert "threshold η" in page.inner_text("#run-ranking")
    # the kept maps are another figure of that update: on a busy machine they may draw a moment after the ranking
    page.wait_for_function("() => document.querySelectorAll('#run-kept g.hm').length === 2", timeout=30_000)
    assert page.locator("#run-kept g.hm").count() == 2  # layer × head and layer × channel maps
    kept = page.inner_text("#run-kept")
    assert re.search(r"heads \(by index\): \d+ of \d+ kept", kept), kept
    assert re.search(r"channels \(by index\): \d+ of \d+ kept", kept), kept
    assert "Newton iterations" in (page.text_content("#run-solver .gtitle") or "")


def test_out_of_range_input_stays_in_the_status_line_and_solver_panels_hide(url: str, chromium: Any) -> None:
    page = open_page(chromium, url)
    page.get_by_text("Calibration, evaluation, device").click()
    enter(page, "#run-nsamples input", "0")
    page.click("#run-button")
    wait_for_text(page, "#run-status", "nsamples must be a whole number ≥ 1")
    page.wait_for_timeout(6000)  # a toast would have faded by now: the status line keeps the message
    assert "nsamples must be a whole number ≥ 1" in status(page)
    enter(page, "#run-nsamples input", "4")
    page.click("#run-button")  # wanda: no iterative solver
    wait_for_text(page, "#run-status", "✓ finished")
    assert not page.locator("#run-solver").is_visible() and not page.locator("#run-lambda").is_visible()
    assert "layers done" in status(page)


def test_the_status_line_answers_the_click_before_the_server_does(url: str, chromium: Any) -> None:
    """The page writes "▶ sent" itself on the click, so the status says what is happening from the first
    moment, however long the server takes to send its first update (seconds on a busy machine)."""
    page = open_page(chromium, url)
    pick(page, "run-method", "wanda")
    page.evaluate(WATCH_JS)
    wait_for_text(page, "#run-status", "✓ finished")
    said = [text for _, _, text in recorded(page) if "▶" in (text or "") or "✓" in (text or "")]
    assert said and "▶ sent" in said[0], said[:3]
    assert any("▶ starting" in text or "▶ running" in text for text in said[1:]), said  # the server took over
