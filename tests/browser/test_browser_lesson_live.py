"""In headless Chromium: the Lesson draws its heat-maps while it runs, before the lesson ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser_app import Gate, browser, chromium_path, registered, serve, session_page, wait_for_text
from toolkit.teach import lesson

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(chromium_path() is None, reason="needs Debian chromium: apt-get install chromium")]


def test_the_lesson_page_shows_a_filled_heatmap_and_the_stage_before_the_lesson_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(base="magnitude")  # the second run waits before each of its linears until the test lets it go
    monkeypatch.setattr(lesson, "METHODS", ("magnitude", gate.NAME))
    with registered(gate), serve(str(tmp_path)) as url, browser() as chromium:
        try:
            page: Any = session_page(chromium, url, width=1440, height=2400)
            page.get_by_role("tab", name="Lesson").click()
            page.click("#lesson-button")
            gate.release(3)
            titles = wait_for_text(page, "#lesson-heatmaps", f"{gate.NAME} · 3 of 14", timeout=240)
            assert "magnitude ·" not in titles and "magnitude" in titles  # magnitude's grid is complete
            assert page.locator("#lesson-heatmaps g.hm").count() == 2
            status = page.inner_text("#lesson-status")
            assert f"{gate.NAME} (2 of 2 to run) · pruning layer 1 of 2" in status and "left" in status, status
            assert "lesson ready" not in status
            assert page.locator("#lesson-bar").count() == 1
            assert page.locator("#lesson-layers .scatterlayer .trace").count() >= 1  # magnitude's layer-error line
        finally:
            gate.open()
        wait_for_text(page, "#lesson-status", "lesson ready", timeout=240)
