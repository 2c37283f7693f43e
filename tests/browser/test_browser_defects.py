"""The dashboard's round-2 defects, each checked where a person sees it: in headless Chromium.

Every test reads what the page rendered (plotly's own figure on the element, titles, legends,
colour bars), so it fails if the drawn page shows the old behaviour, whatever the figure
builders' unit tests say. Live states are held with :class:`gate.Gate`, so the checks do not
depend on how fast the machine is.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.compare_tab import run_choices
from tests.helpers.browser_app import (
    Gate,
    chromium_path,
    dom_click,
    open_page,
    pick,
    serve,
    set_extra_options,
    status,
    wait_for_linears,
    wait_for_text,
)
from tests.helpers.synthetic_runs import write_run
from toolkit.api import open_run
from toolkit.compare import masks as compare

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
# Records, at each frame in which the page changed, the titles both solver panels show (when they changed).
PAIRS_JS = """() => {
  window._pairs = []; let due = false;
  const title = (id) => { const t = document.querySelector(id + ' .gtitle'); return t ? t.textContent : ''; };
  const sample = () => {
    due = false;
    const pair = [title('#run-solver'), title('#run-lambda')], last = window._pairs[window._pairs.length - 1];
    if (!last || last[0] !== pair[0] || last[1] !== pair[1]) window._pairs.push(pair);
  };
  const note = () => { if (!due) { due = true; requestAnimationFrame(sample); } };
  // the panels are not in the page until they are shown: watch the whole page
  new MutationObserver(note).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""
SLOW = 600  # seconds: a generous bound for a loaded 2-core machine, never reached on a free one
TEXTS_JS = "els => els.map(e => e.textContent)"
LINEAR = re.compile(r"layer (\d+) · (\S+)")


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
def url(store: dict[str, Path], gate: Gate) -> Iterator[str]:
    with serve(str(next(iter(store.values())).parent)) as address:
        yield address


def drawn(page: Any, selector: str) -> dict[str, Any] | None:
    """The plotly figure drawn in ``selector`` (``{data, layout}`` after plotly's defaults), or None."""
    return page.evaluate(DRAWN_JS, selector)


def choose_runs(page: Any, paths: list[Path]) -> None:
    """Add the runs at ``paths`` to the Compare tab's selection, by the names Compare lists them under."""
    for path in paths:
        label = {run_id: name for name, run_id in run_choices(str(path.parent))}[path.name]
        page.click("#compare-runs input")
        page.locator(f'li[aria-label="{label}"]').first.click()
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


def filled_cells(figure: dict[str, Any]) -> dict[tuple[int, int], float]:
    """``{(row, column): z}`` of the heat-map's filled cells (z is log10 of the relative error)."""
    rows = figure["data"][0]["z"]
    return {(i, j): value for i, row in enumerate(rows) for j, value in enumerate(row) if value is not None}


def start_held_run(page: Any, gate: Gate, linears: int) -> None:
    """Start a gated FISTAPruner run (three outer rounds per linear) that solves ``linears`` linears, then waits."""
    pick(page, "run-method", Gate.NAME)
    set_extra_options(page, "max_rounds=3")
    gate.release(linears)
    dom_click(page, "#run-button")


def cancel_run(page: Any) -> None:
    """Cancel the page's run and wait until it says so: the next test's run then starts at once, not queued."""
    dom_click(page, "#cancel-button")
    wait_for_text(page, "#run-status", "cancelled", timeout=SLOW)


def test_heatmap_keeps_its_stated_colour_scale_and_cell_values_as_the_run_goes(url: str, chromium: Any,
                                                                                held: Gate) -> None:
    page = open_page(chromium, url)
    start_held_run(page, held, 1)
    wait_for_linears(page, 1, timeout=SLOW)
    early = drawn(page, "#run-heatmap")
    assert early is not None
    ((cell, value),) = filled_cells(early).items()
    held.release(7)  # the rest of layer 0 and the first linear of layer 1
    wait_for_linears(page, 8, timeout=SLOW)
    later = drawn(page, "#run-heatmap")
    colorbar = page.text_content("#run-heatmap .colorbar") or ""
    cancel_run(page)
    for moment in (early, later):
        assert moment is not None
        trace = moment["data"][0]
        assert (trace["zmin"], trace["zmax"]) == (-4, 0)  # log10 of the stated 1e-4…1, never the running maximum
        assert filled_cells(moment)[cell] == value  # the first cell keeps its value, hence its colour
    assert later is not None and len(filled_cells(later)) == 8
    assert "fixed 0.0001…1" in colorbar, colorbar


def test_status_line_heatmap_and_panels_count_layers_from_zero(url: str, chromium: Any, held: Gate) -> None:
    page = open_page(chromium, url)
    start_held_run(page, held, 8)  # layer 0 (7 linears) and the first linear of layer 1; the run then waits
    wait_for_linears(page, 8, timeout=SLOW)
    wait_for_text(page, "#run-status", "1 of 2 layers done", timeout=SLOW)
    page.wait_for_function("() => /layer 1 ·/.test(document.querySelector('#run-lambda .gtitle')?.textContent)",
                           timeout=SLOW * 1000)
    page.wait_for_function("() => (document.querySelector('#run-layers .js-plotly-plot')?._fullData?.[0]?.x || [])"
                           ".length === 1", timeout=SLOW * 1000)
    line = status(page)
    heatmap, layers = drawn(page, "#run-heatmap"), drawn(page, "#run-layers")
    ticks = page.eval_on_selector_all("#run-heatmap .yaxislayer-above .ytick text", TEXTS_JS)
    titles = [page.text_content(f"{panel} .gtitle") or "" for panel in ("#run-solver", "#run-lambda")]
    cancel_run(page)
    now = re.search(r"pruning layer (\d+)", line)
    assert now is not None, line
    assert heatmap is not None and layers is not None
    rows = {row for row, _ in filled_cells(heatmap)}
    assert rows == {0, 1} and int(now.group(1)) == max(rows) == 1, (line, rows)  # the row being filled is the one named
    assert sorted(ticks) == ["0", "1"], ticks  # the heat-map's rows are layers 0 and 1
    assert layers["data"][0]["x"] == [0]  # the one finished layer is layer 0
    for title in titles:
        found = LINEAR.search(title)
        assert found and found.group(1) == "1", title


def test_fista_panels_name_one_linear_with_whole_rounds_and_a_legend(url: str, chromium: Any, held: Gate) -> None:
    page = open_page(chromium, url)
    page.evaluate(PAIRS_JS)
    start_held_run(page, held, 1)
    for done, name in enumerate(("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), start=1):
        # one linear at a time; the heat-map counts a linear ~0.5 s before the panels redraw, so wait for
        # both panels to name the held linear before the next one may start (else a fast CPU skips it)
        wait_for_linears(page, done, timeout=SLOW)
        page.wait_for_function(
            "(title) => ['#run-solver', '#run-lambda'].every("
            "id => (document.querySelector(id + ' .gtitle')?.textContent || '').endsWith(title))",
            arg=f"layer 0 · {name}", timeout=SLOW * 1000)
        held.release(1)
    page.wait_for_selector("#run-lambda .legend", timeout=SLOW * 1000)
    page.wait_for_function("() => !!document.querySelector('#run-lambda .js-plotly-plot')?._fullLayout?.yaxis3",
                           timeout=SLOW * 1000)  # the λ panel's third axis is drawn a moment after its legend
    legend = page.text_content("#run-lambda .legend") or ""
    solver, lam = drawn(page, "#run-solver"), drawn(page, "#run-lambda")
    labels = page.eval_on_selector_all("#run-solver .colorbar .cbaxis text", TEXTS_JS)
    held.release(4)  # then four linears at full speed: the panels redraw as fast as the run goes
    wait_for_linears(page, 8, timeout=SLOW)
    cancel_run(page)
    for name in ("λ high", "λ low", "E_round/E_total", "ξ", "sparsity before rounding"):
        assert name in legend, legend
    assert solver is not None and lam is not None
    marker = solver["data"][0]["marker"]
    assert all(float(tick).is_integer() for tick in marker["colorbar"]["tickvals"]), marker["colorbar"]
    assert labels and all(re.fullmatch(r"\d+", label) for label in labels), labels  # rounds are whole numbers
    assert lam["layout"]["yaxis3"]["range"] == [0, 1]  # sparsity before rounding: 0…100 %
    pairs = page.evaluate("window._pairs")
    named = [(LINEAR.search(a), LINEAR.search(b)) for a, b in pairs]
    shown = [(a.groups(), b.groups()) for a, b in named if a and b]
    assert len({a for a, _ in shown}) >= 3, pairs  # the panels moved through several linears
    mismatched = [pair for pair in shown if pair[0] != pair[1]]
    assert not mismatched, f"the panels named different linears in one frame: {mismatched[:5]}"
