"""The answer first, in headless Chromium: the finished run's perplexity in the first viewport, refused input.

The default job (Wanda 50 %, the quick protocol) on tiny-llama: its result card must sit in the first
1440 × 900 viewport (and a projector's 1280 × 720), and the status line must end with the perplexity.
Before any run only the panels every run fills show. A sparsity typed out of range is refused in the
status line (the slider's own number box would clamp it), and nothing runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser_app import (
    Gate,
    chromium_path,
    open_page,
    pick,
    serve,
    status,
    wait_for_linears,
    wait_for_text,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(chromium_path() is None, reason="needs Debian chromium: apt-get install chromium")]
PPL = re.compile(r"ppl (\d+\.\d\d) → (\d+\.\d\d) \(([+-][\d.]+%)\)")


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def url(runs_dir: Path, gate: Gate) -> Iterator[str]:
    with serve(str(runs_dir)) as address:
        yield address


def box(page: Any, selector: str) -> dict[str, float]:
    found = page.locator(selector).first.bounding_box()
    assert found is not None, f"{selector} is not on the page"
    return found


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (1280, 720)])
def test_the_finished_runs_perplexity_is_in_the_first_viewport(url: str, chromium: Any, width: int,
                                                                 height: int) -> None:
    page = open_page(chromium, url, width, height)
    page.click("#run-button")
    text = wait_for_text(page, "#run-status", "✓ finished")
    dense, compressed, change = PPL.search(text).groups()  # type: ignore[union-attr]
    page.wait_for_selector("#run-card table")
    page.evaluate("window.scrollTo(0, 0)")
    card = page.inner_text("#run-card")
    assert f"{dense} → {compressed} ({change})" in card and "sparsity achieved" in card and "50.00%" in card
    assert "not smaller as saved: pruned weights are stored as zeros in a dense checkpoint" in card
    numbers = box(page, "#run-card td strong")  # the perplexity, the card's first cell
    assert page.inner_text("#run-card td strong").startswith(f"{dense} → {compressed}")
    assert numbers["y"] >= 0 and numbers["y"] + numbers["height"] <= height, numbers
    whole = box(page, "#run-card")
    assert whole["y"] + whole["height"] <= height, f"the card ends at {whole['y'] + whole['height']} px"
    assert box(page, "#run-status")["y"] < whole["y"] < box(page, "#run-heatmap")["y"]  # right under the status
    assert page.locator("#export-heatmap").is_visible() and page.locator("#run-files").is_visible()
    page.close()


def test_before_a_run_the_page_shows_only_what_every_run_fills(url: str, chromium: Any) -> None:
    page = open_page(chromium, url, 1440, 900)
    page.wait_for_timeout(500)
    for hidden in ("#run-card", "#run-solver", "#run-lambda", "#run-allocation", "#run-ranking", "#run-kept",
                   "#run-files", "#export-heatmap", "#export-heatmap-files", "#run-warnings", "#run-result"):
        assert not page.locator(hidden).is_visible(), f"{hidden} shows before any run"
    assert page.locator("#run-heatmap").is_visible() and page.locator("#run-layers").is_visible()
    howtos = page.locator(".howto")
    assert sum(howtos.nth(i).is_visible() for i in range(howtos.count())) == 2  # the heat-map's and the layers'
    assert page.get_by_text("for a paper").count() == 0 or not page.get_by_text("for a paper").first.is_visible()
    page.close()


def test_the_solver_panels_sit_beside_the_heatmap_while_fistapruner_runs(url: str, chromium: Any,
                                                                        held: Gate) -> None:
    page = open_page(chromium, url, 1440, 900)
    pick(page, "run-method", Gate.NAME)  # FISTAPruner, one linear per release
    held.release(2)
    page.click("#run-button")
    wait_for_linears(page, 2)
    page.wait_for_selector("#run-lambda .scatterlayer .trace")
    heatmap, solver, lam = box(page, "#run-heatmap"), box(page, "#run-solver"), box(page, "#run-lambda")
    assert abs(solver["y"] - heatmap["y"]) < 5 and abs(lam["y"] - heatmap["y"]) < 5  # one row
    assert heatmap["x"] < solver["x"] < lam["x"] and lam["y"] + 100 < 900  # beside it, in the first viewport
    assert box(page, "#run-layers")["y"] > heatmap["y"] + heatmap["height"]  # the layer error wraps below
    held.open()
    wait_for_text(page, "#run-status", "✓ finished")
    page.close()


@pytest.mark.parametrize("typed", ["150", "-5"])
def test_a_sparsity_typed_out_of_range_is_refused_and_nothing_runs(url: str, chromium: Any, runs_dir: Path,
                                                                  typed: str) -> None:
    page = open_page(chromium, url, 1440, 900)
    before = sorted(p.name for p in runs_dir.iterdir())
    field = page.locator("#run-percent input[type=number]")
    field.fill(typed)
    field.press("Tab")  # the slider's number box would clamp here (150 → 95)
    page.wait_for_timeout(300)
    assert field.input_value() == typed
    page.click("#run-button")
    text = wait_for_text(page, "#run-status", "⚠")
    assert f"sparsity {float(typed)}% is outside [0, 100)" in text and "✓" not in text and "▶" not in text
    page.wait_for_timeout(3000)  # nothing started meanwhile, and the line stays
    assert f"sparsity {float(typed)}% is outside" in status(page)
    assert page.locator(".toast-body").count() == 0  # one message: the status line, no toast besides
    assert sorted(p.name for p in runs_dir.iterdir()) == before  # no run folder
    page.close()
