"""Compare masks in headless Chromium: a tile at native resolution and the four-way difference with its legend."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.browser_app import chromium_path, enter, open_page, serve, wait_for_text
from tests.helpers.synthetic_runs import write_run

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(chromium_path() is None, reason="needs Debian chromium: apt-get install chromium")]
SHAPES = {"mlp.down_proj": (96, 256)}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    runs_dir = tmp_path_factory.mktemp("runs")
    ids = [write_run(runs_dir, {"model": "tiny-llama", "method": method, "sparsity": "50%"}, seed=seed,
                     shapes=SHAPES).name for seed, method in enumerate(("wanda", "sparsegpt"))]
    with serve(str(runs_dir)) as address:
        yield address, ids


def test_compare_zooms_a_tile_and_colours_the_difference_by_category(served: tuple[str, list[str]],
                                                                     chromium: Any) -> None:
    url, ids = served
    page = open_page(chromium, url, 1440, 1400)
    page.get_by_role("tab", name="Compare masks").click()
    for run_id in ids:
        page.click("#compare-runs input")
        page.locator("li[aria-label*='" + run_id + "']").first.click()
    page.keyboard.press("Escape")
    page.wait_for_function("() => document.querySelector('#compare-linear input').value === 'mlp.down_proj'",
                           timeout=30000)
    enter(page, "#compare-tile-row input", "32")
    enter(page, "#compare-tile-col input", "64")
    page.click("#compare-button")
    message = wait_for_text(page, "#compare-message", "two random masks", timeout=60)
    assert re.search(r"IoU of kept weights 0\.\d+ \(two random masks: 0\.3\d\d\)", message), message
    page.wait_for_selector("#compare-difference .legend")
    legend = page.text_content("#compare-difference .legend") or ""
    for category in ("pruned by both", "kept by both", "only"):
        assert category in legend, legend
    assert len(re.findall(r"\(\d+\.\d%\)", legend)) == 4, legend
    assert "rows 32–95, columns 64–191" in (page.text_content("#compare-difference .gtitle") or "")
    assert "native resolution" in (page.text_content("#compare-tile .gtitle") or "")
    assert page.locator("#compare-tile g.hm").count() == 2  # one native tile per run
    assert page.locator("#compare-masks .shapelayer path").count() >= 2  # the tile outlined on both whole views
    assert "pq/(p+q−pq)" in page.inner_text("#compare-overlap")
