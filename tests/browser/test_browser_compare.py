"""Compare in headless Chromium: a tile at native resolution, the four-way difference, and three runs overlaid."""

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


LABELS = ("tiny-llama · Wanda 50%", "tiny-llama · SparseGPT 50%", "tiny-llama · FISTAPruner 50% · OWL · DSnoT")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    runs_dir = tmp_path_factory.mktemp("runs")
    configs = ({"method": "wanda"}, {"method": "sparsegpt"},
               {"method": "fista", "allocation": "owl:5,0.08", "refine": "dsnot:50"})
    ids = [write_run(runs_dir, {"model": "tiny-llama", "sparsity": "50%", "eval_data": "wiki", **config}, seed=seed,
                     shapes=SHAPES, ppl=30.0 - 3 * seed, layers=3).name for seed, config in enumerate(configs)]
    with serve(str(runs_dir)) as address:
        yield address, ids


def choose(page: Any, labels: tuple[str, ...]) -> None:
    """Pick runs in the Compare multi-select by their names (method, target, allocation, refinement)."""
    for label in labels:
        page.click("#compare-runs input")
        page.locator(f'li[aria-label="{label}"]').first.click()
    page.keyboard.press("Escape")


def test_compare_zooms_a_tile_and_colours_the_difference_by_category(served: tuple[str, list[str]],
                                                                     chromium: Any) -> None:
    url, _ = served
    page = open_page(chromium, url, 1440, 1400)
    page.get_by_role("tab", name="Compare masks").click()
    choose(page, LABELS[:2])
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


def test_three_runs_overlaid_by_name_and_the_message_follows_the_layer(served: tuple[str, list[str]],
                                                                       chromium: Any) -> None:
    url, _ = served
    page = open_page(chromium, url, 1440, 900)
    page.get_by_role("tab", name="Compare masks").click()
    choose(page, LABELS)
    page.wait_for_function("() => document.querySelector('#compare-linear input').value !== ''", timeout=30000)
    page.click("#compare-button")
    wait_for_text(page, "#compare-message", "IoU of kept weights", timeout=60)
    page.wait_for_selector("#compare-overlay-error .legend")
    assert page.locator("#compare-overlay-error .scatterlayer .trace").count() == 3  # one line per run
    assert page.locator("#compare-overlay-sparsity .scatterlayer .trace").count() == 3
    legend = page.text_content("#compare-overlay-error .legend") or ""
    for name in ("Wanda 50%", "SparseGPT 50%", "FISTAPruner 50% · OWL · DSnoT"):
        assert name in legend, legend
    assert not re.search(r"[0-9a-f]{4}\b", legend.replace("50%", ""))  # no hash suffix
    ticks = [t.strip() for t in page.locator("#compare-overlay-ppl .ytick text").all_text_contents()]
    assert ticks and all(len(t) > 1 for t in ticks), ticks  # whole values (20, 30), never a bare leading digit
    page.click("#compare-layer input")
    page.locator('li[aria-label="2"]').first.click()
    message = wait_for_text(page, "#compare-message", "press Compare", timeout=30)
    assert "IoU of kept weights" not in message and "layer 2" in message, message
    assert page.locator("#compare-overlay-error .scatterlayer .trace").count() == 3  # the overlays stay
