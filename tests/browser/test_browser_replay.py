"""A recovery run replayed in the Runs tab at 1440 × 900 (headless Chromium): its loss curve, no pruning panels.

The run store holds a tiny-llama parent (Wanda 50 %, model saved) and a real 3-step recovery of it.
Opening the recovery draws a plotly trace whose y values are the losses its result.json recorded,
shows none of a pruning run's panels, and its parent button replays the parent (heat-map, no loss)
under the Run tab's result card. The table names both runs, each beside its run id.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser_app import chromium_path, dom_click, open_page, pick, serve, wait_for_text
from tests.helpers.recovery import parent_run

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(chromium_path() is None, reason="needs Debian chromium: apt-get install chromium")]
WIDTH, HEIGHT = 1440, 900
LOSS_JS = "() => Array.from(document.querySelector('#runs-loss .js-plotly-plot')?.data?.[0]?.y || [])"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any], Path]]:
    """(the app's URL, the recovery's result dict, the parent's folder)."""
    from toolkit.api import recover_model

    runs_dir = tmp_path_factory.mktemp("replay-runs")
    parent = parent_run(runs_dir)
    result = recover_model(run=parent, steps=3)
    with serve(str(runs_dir)) as url:
        yield url, result, parent


def _open(page: Any, run_id: str) -> None:
    page.get_by_role("tab", name="Runs").click()
    page.wait_for_selector("#runs-message:has-text('2 runs')")
    pick(page, "runs-pick", run_id)
    dom_click(page, "#runs-open")


def test_a_replayed_recovery_draws_its_loss_curve(store: tuple[str, dict[str, Any], Path], chromium: Any) -> None:
    url, result, parent = store
    page = open_page(chromium, url, WIDTH, HEIGHT)
    _open(page, result["run_id"])
    wait_for_text(page, "#runs-status", "✓ finished · recover run", timeout=60)
    page.wait_for_function(f"() => ({LOSS_JS})().length === {len(result['loss'])}", timeout=30_000)
    assert page.evaluate(LOSS_JS) == pytest.approx(result["loss"])
    assert "recovery loss" in (page.text_content("#runs-loss .gtitle") or "")
    for section in ("errors", "trace", "structure", "allocation"):  # nothing of a pruning run
        assert not page.locator(f"#runs-section-{section}").is_visible(), section
    assert "prune time" not in page.inner_text("#runs-result") and "training time" in page.inner_text("#runs-result")
    assert "layers" not in page.inner_text("#runs-status")
    assert not page.inner_text("#runs-card").strip()  # a recovery has no pruning card
    dom_click(page, "#runs-parent")  # the parent, one click away
    page.wait_for_selector("#runs-section-errors", state="visible", timeout=60_000)
    wait_for_text(page, "#runs-status", "wanda 50%", timeout=60)
    assert not page.locator("#runs-section-recovery").is_visible()
    assert parent.name in page.inner_text("#runs-status") + page.inner_text("#runs-result")
    ppl = json.loads((parent / "result.json").read_text())["ppl"]["wiki"]
    card = wait_for_text(page, "#runs-card", "sparsity achieved", timeout=30)  # the Run tab's card, replayed
    assert f"{ppl:.2f}" in card and "pruning" in card


def test_the_table_names_the_runs_beside_their_ids(store: tuple[str, dict[str, Any], Path], chromium: Any) -> None:
    url, result, parent = store
    page = open_page(chromium, url, WIDTH, HEIGHT)
    page.get_by_role("tab", name="Runs").click()
    page.wait_for_selector("#runs-message:has-text('2 runs')")
    headers = [th.inner_text().strip() for th in page.locator("#runs-table th").all()]
    assert {"run", "prune s", "training s", "run id"} <= set(headers)
    table = wait_for_text(page, "#runs-table", parent.name, timeout=30)
    lines = table.splitlines()
    for name, run_id in (("Wanda 50%", parent.name), ("recover 50%", result["run_id"])):
        assert name in lines and run_id in lines and lines.index(name) < lines.index(run_id)
