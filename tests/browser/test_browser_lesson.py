"""The Lesson tab in headless Chromium, with its four runs already in the store (no pruning runs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser_app import browser, chromium_path, open_page, serve, wait_for_text
from tests.teach.test_lesson import stored_lesson_run
from toolkit.teach import lesson

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(chromium_path() is None, reason="needs Debian chromium: apt-get install chromium")]
PPL = {"magnitude": 90.0, "wanda": 40.0, "sparsegpt": 30.0, "fista": 28.0}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run store holding a finished run for each lesson config (matched by model, method, sparsity, protocol)."""
    root = tmp_path_factory.mktemp("lesson-runs")
    for index, config in enumerate(lesson.lesson_configs("tiny-llama", str(root))):
        stored_lesson_run(root, config.to_dict(), seed=index, ppl=PPL[config.method])
    return root


@pytest.fixture(scope="module")
def url(seeded: Path) -> Iterator[str]:
    with serve(str(seeded)) as address:
        yield address


def test_the_lesson_button_reuses_the_stored_runs_and_draws_four_perplexity_bars(url: str, seeded: Path) -> None:
    before = sorted(p.name for p in seeded.iterdir())
    with browser() as chromium:
        page: Any = open_page(chromium, url, height=2400)
        page.get_by_role("tab", name="Lesson").click()
        plan = wait_for_text(page, "#lesson-plan", "Every run is in the store", timeout=30)
        assert "Reused from the run store: magnitude" in plan and "FISTAPruner" in plan
        page.click("#lesson-button")
        wait_for_text(page, "#lesson-status", "lesson ready", timeout=60)
        bars = page.locator("#lesson-ppl .barlayer .point")
        bars.nth(3).wait_for(timeout=60_000)  # plotly draws after the status text lands (seconds on a busy machine)
        assert bars.count() == 4
        labels = page.text_content("#lesson-ppl .xaxislayer-above") or ""
        assert all(name in labels for name in ("magnitude", "Wanda", "SparseGPT", "FISTAPruner"))
        heatmaps = page.locator("#lesson-heatmaps g.hm")
        heatmaps.nth(3).wait_for(timeout=60_000)
        assert heatmaps.count() == 4
        assert "Perplexity" in page.inner_text("#lesson-walkthrough")
    assert sorted(p.name for p in seeded.iterdir()) == before  # nothing ran (how fast: benchmarks/bench_lesson.py)


def test_the_lesson_offers_both_embedded_models_with_their_licences_and_plans_the_one_picked(url: str) -> None:
    with browser() as chromium:
        page: Any = open_page(chromium, url, width=1280, height=720)
        page.get_by_role("tab", name="Lesson").click()
        wait_for_text(page, "#lesson-plan", "Every run is in the store", timeout=30)
        info = page.inner_text("#lesson-model")
        assert "smollm2-135m (Apache-2.0); gemma-3-270m (Gemma Terms of Use) are embedded" in info
        page.click("#lesson-model input")
        options = page.locator("ul[role=listbox] li").all_inner_texts()
        assert [o.replace("✓", "").strip() for o in options] == ["tiny-llama", "smollm2-135m", "gemma-3-270m"]
        page.locator('li[aria-label="gemma-3-270m"]').first.click()
        plan = wait_for_text(page, "#lesson-plan", "on gemma-3-270m", timeout=30)
        assert "Every run is in the store" not in plan  # the stored runs are tiny-llama's
