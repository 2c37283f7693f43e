"""A notebook re-opened in JupyterLab after its kernel is gone keeps the dashboard's figures and says so in one line.

The notebook is executed by nbclient (its kernel ends with it) and saved with its widget state, then
opened in JupyterLab in headless Chromium without running anything (signed, as a notebook this
user saved): the dashboard is restored from its widget state, its heat-map holds the finished
run's cells, its line says the kernel is gone, and the output under it shows the final figures
as images. Re-running the cell gives a dashboard linked to the new kernel, without the line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.browser.test_lab_browser import jupyter_lab
from tests.helpers.browser_app import browser, chromium_path
from toolkit.notebook.kernel_note import GONE

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(chromium_path() is None, reason="needs Debian's chromium")]
CELLS = [
    "from toolkit.figures.static import use_static_fallback\nuse_static_fallback()",
    "from toolkit.notebook.widgets import Dashboard\n"
    "dash = Dashboard(model='tiny-llama', method='wanda', sparsity='50%', runs_dir='runs',\n"
    "                 nsamples=4, seqlen=32, eval_seqlen=32, eval_windows=2)\ndash",
    "view = dash.run()\nview.status",
]
HEATMAP_CELLS = """() => [...document.querySelectorAll('.js-plotly-plot')]
  .flatMap(plot => (plot.data || []).filter(trace => trace.type === 'heatmap'))
  .map(trace => (trace.z || []).flat().filter(value => value !== null).length)"""


def _executed(folder: Path) -> Path:
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(folder)}},
                   ).execute(env={**os.environ, "OMP_NUM_THREADS": "1"})
    path = folder / "reopened.ipynb"
    nbformat.write(notebook, path)
    return path


def _open(chromium: Any, url: str, name: str) -> Any:
    page = chromium.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{url}/lab/tree/{name}")
    idle = page.get_by_text("Python 3 (ipykernel) | Idle")  # a new kernel, not the one that ran the notebook
    idle.wait_for(timeout=120_000)
    return page


def _kept_images(page: Any) -> int:
    kept = page.locator(".jp-OutputArea-output").filter(has_text="figures of run").first
    kept.wait_for(timeout=60_000)
    images = kept.locator("img")
    return images.count() if images.first.is_visible() else 0


def test_a_reopened_dashboard_keeps_its_figures_and_says_its_kernel_is_gone(tmp_path: Path) -> None:
    from nbformat.sign import NotebookNotary

    folder = tmp_path / "notebooks"
    folder.mkdir()
    path = _executed(folder)
    notebook = nbformat.read(path, as_version=4)
    NotebookNotary().sign(notebook)  # as if this user had saved it: JupyterLab draws its widgets
    nbformat.write(notebook, path)
    with jupyter_lab(folder) as url, browser() as chromium:
        page = _open(chromium, url, path.name)
        try:
            page.get_by_text(GONE).wait_for(state="visible", timeout=90_000)
            page.locator(".jp-OutputArea-output .js-plotly-plot").first.wait_for(timeout=60_000)
        finally:
            page.screenshot(path=str(tmp_path / "reopened.png"))
        filled = page.evaluate(HEATMAP_CELLS)
        assert filled and max(filled) == 2 * 7  # tiny-llama: 2 layers × 7 linears, every cell of the final map
        assert _kept_images(page) == 3  # wanda: heat-map, layer error, per-layer sparsity
        assert page.get_by_text(GONE).count() == 1  # one line, once
        page.locator(".jp-Notebook .jp-Cell").first.click()
        page.keyboard.press("Escape")
        for _ in range(2):  # re-run the dashboard's cell: a new dashboard, linked to this kernel
            page.keyboard.press("Shift+Enter")
        page.get_by_text("Pick a model").first.wait_for(timeout=180_000)
        page.wait_for_timeout(3000)
        assert page.get_by_text(GONE).filter(visible=True).count() == 0  # the line is for a widget without kernel
