"""In headless Chromium: a Lesson clicked while a Run prunes waits in line, then runs its missing runs after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser_app import Gate, browser, chromium_path, pick, registered, serve, session_page, wait_for_text
from toolkit.store.runs import list_runs
from toolkit.teach import lesson

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(chromium_path() is None, reason="needs Debian chromium: apt-get install chromium")]


def test_the_lesson_shows_its_place_behind_a_run_and_starts_when_the_device_is_free(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lesson, "METHODS", ("magnitude", "wanda"))  # the app runs in this process; both to run
    gate = Gate(base="magnitude")
    with registered(gate), serve(str(tmp_path)) as url, browser() as chromium:
        try:
            run_page: Any = session_page(chromium, url)
            pick(run_page, "run-method", gate.NAME)
            run_page.click("#run-button")
            wait_for_text(run_page, "#run-status", "▶ running", timeout=120)
            lesson_page: Any = session_page(chromium, url, height=2400)
            lesson_page.get_by_role("tab", name="Lesson").click()
            lesson_page.click("#lesson-button")
            queued = wait_for_text(lesson_page, "#lesson-status", "position 1 in line", timeout=60)
            assert "queued" in queued and "ahead of the lesson" in queued
            assert not [r for r in list_runs(tmp_path) if r.config.get("method") == "magnitude"]  # not started
        finally:
            gate.open()
        wait_for_text(run_page, "#run-status", "✓ finished", timeout=120)
        wait_for_text(lesson_page, "#lesson-status", "lesson ready", timeout=300)
    statuses = {r.config.get("method"): r.status for r in list_runs(tmp_path)}
    assert statuses == {gate.NAME: "finished", "magnitude": "finished", "wanda": "finished"}
