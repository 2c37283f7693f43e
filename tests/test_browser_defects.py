"""The dashboard's round-2 defects, each checked where a person sees it: in headless Chromium.

Every test reads what the page rendered (plotly's own figure on the element, titles, legends,
colour bars), so it fails if the drawn page shows the old behaviour, whatever the figure
builders' unit tests say. Live states are held with :class:`gate.Gate`, so the checks do not
depend on how fast the machine is.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_app import (
    Gate,
    browser,
    chromium_path,
    open_page,
    registered,
    serve,
    wait_for_text,
)
from synthetic_runs import write_run

from toolkit import compare
from toolkit.api import open_run

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(chromium_path() is None, reason="needs Debian chromium: apt-get install chromium")]
COMPARE_PANELS = ("masks", "tile", "difference", "overlap", "histograms", "all")
SHAPES = {"mlp.down_proj": (96, 256)}
# plotly's figure as drawn on an element: its data and layout after defaults (what the page shows)
DRAWN_JS = """(selector) => {
  const plot = document.querySelector(selector + ' .js-plotly-plot');
  if (!plot || !plot._fullData) return null;
  const clean = (x) => JSON.parse(JSON.stringify(x, (k, v) => (k.startsWith('_') ? undefined : v)));
  return {data: plot._fullData.map(clean), layout: clean(plot._fullLayout)};
}"""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three finished runs with keep-masks: two of tiny-llama (wanda, sparsegpt), one of tiny-gemma3."""
    root = tmp_path_factory.mktemp("runs")
    runs = {method: write_run(root, {"model": "tiny-llama", "method": method, "sparsity": "50%"}, seed=seed,
                              shapes=SHAPES) for seed, method in enumerate(("wanda", "sparsegpt"))}
    runs["other model"] = write_run(root, {"model": "tiny-gemma3", "method": "wanda", "sparsity": "50%"}, seed=2,
                                    shapes=SHAPES)
    return runs


@pytest.fixture(scope="module")
def gate() -> Iterator[Gate]:
    """The test hook that holds a run before each linear (registered before the app is built)."""
    with registered(Gate()) as hook:
        yield hook


@pytest.fixture(scope="module")
def url(store: dict[str, Path], gate: Gate) -> Iterator[str]:
    with serve(str(next(iter(store.values())).parent)) as address:
        yield address


@pytest.fixture
def held(gate: Gate) -> Iterator[Gate]:
    """The gate closed at the start of a test and opened at its end (a failing test leaves no run hanging)."""
    gate.close()
    try:
        yield gate
    finally:
        gate.open()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with browser() as instance:
        yield instance


def drawn(page: Any, selector: str) -> dict[str, Any] | None:
    """The plotly figure drawn in ``selector`` (``{data, layout}`` after plotly's defaults), or None."""
    return page.evaluate(DRAWN_JS, selector)


def choose_runs(page: Any, paths: list[Path]) -> None:
    """Add the runs at ``paths`` to the Compare tab's selection."""
    for path in paths:
        page.click("#compare-runs input")
        page.locator(f"li[aria-label*='{path.name}']").first.click()
    page.keyboard.press("Escape")


def open_compare(page: Any, paths: list[Path]) -> None:
    """Compare the runs at ``paths`` on mlp.down_proj of layer 0 and wait for the drawn panels."""
    page.get_by_role("tab", name="Compare masks").click()
    choose_runs(page, paths)
    page.wait_for_function("() => document.querySelector('#compare-linear input').value === 'mlp.down_proj'",
                           timeout=30000)
    page.click("#compare-button")
    wait_for_text(page, "#compare-message", "IoU of kept weights", timeout=60)
    for panel in COMPARE_PANELS:
        page.wait_for_selector(f"#compare-{panel} .js-plotly-plot", timeout=30000)


def test_runs_of_different_models_clear_every_comparison_panel(url: str, chromium: Any,
                                                               store: dict[str, Path]) -> None:
    page = open_page(chromium, url, 1440, 1400)
    open_compare(page, [store["wanda"], store["sparsegpt"]])
    choose_runs(page, [store["other model"]])  # now the selection holds runs of two models
    page.click("#compare-button")
    message = wait_for_text(page, "#compare-message", "different models", timeout=60)
    assert "⚠" in message
    page.wait_for_timeout(1000)  # any late redraw of the old comparison would land by now
    stale = {panel: page.locator(f"#compare-{panel} .js-plotly-plot").count() for panel in COMPARE_PANELS}
    assert not any(stale.values()), f"panels still drawn under the warning: {stale}"


def test_overlap_chart_is_iou_of_kept_weights_beside_its_chance_baseline(url: str, chromium: Any,
                                                                         store: dict[str, Path]) -> None:
    page = open_page(chromium, url, 1440, 1400)
    open_compare(page, [store["wanda"], store["sparsegpt"]])
    a, b = (compare.load_masks([open_run(store[m]) for m in ("wanda", "sparsegpt")], 0, "mlp.down_proj").values())
    p, q = float(a.mean()), float(b.mean())  # kept fractions
    figure = drawn(page, "#compare-overlap")
    assert figure is not None
    measured, chance = figure["data"]
    assert measured["name"] == "IoU of kept weights" and "pq/(p+q−pq)" in chance["name"]
    assert measured["y"][0] == pytest.approx(float((a & b).sum() / (a | b).sum()), abs=1e-6)
    assert chance["y"][0] == pytest.approx(p * q / (p + q - p * q), abs=1e-6)
    assert figure["layout"]["yaxis"]["title"]["text"] == "IoU"  # one metric on the axis, nothing pointing the other way
    legend = page.text_content("#compare-overlap .legend") or ""
    assert "IoU of kept weights" in legend and "two random masks" in legend, legend
    every = drawn(page, "#compare-all")
    assert every is not None
    names = [trace["name"] for trace in every["data"]]
    assert len(names) == 2 and names[0].startswith("IoU") and "pq/(p+q−pq)" in names[1], names
    assert every["data"][1]["line"]["dash"] == "dot"
