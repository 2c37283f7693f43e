"""The notebooks run top to bottom on the embedded model (nbclient; slow); test_stored_notebooks checks their files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = ["01_quickstart.ipynb", "02_methods_compared.ipynb",  # in order: 02 reuses 01's Wanda run
         "04_removing_heads_and_channels.ipynb"]
QUANT = "03_pruning_meets_quantization.ipynb"  # tiny-llama and one synthetic layer (a kernel start: slow tier)
PLOTLY = "application/vnd.plotly.v1+json"


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("notebook-runs")


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(name: str, runs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbclient import NotebookClient

    monkeypatch.setenv("PRUNELAB_RUNS", str(runs_dir))  # the kernel inherits it: runs go to a temp store
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(notebook, timeout=1800, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    errors = [output for cell in notebook.cells for output in cell.get("outputs", [])
              if output.get("output_type") == "error"]
    assert not errors


@pytest.mark.slow
def test_quantization_notebook_runs_and_embeds_its_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbclient import NotebookClient

    monkeypatch.setenv("PRUNELAB_RUNS", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    notebook = nbformat.read(NOTEBOOKS / QUANT, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
                   ).execute()
    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    assert not [output for output in outputs if output.get("output_type") == "error"]
    figures = [output for output in outputs if PLOTLY in output.get("data", {})]
    titles = [figure["data"][PLOTLY]["layout"]["title"]["text"] for figure in figures]
    assert len(figures) == 5, titles  # error vs bits, convergence, projection trace, joint bars, ppl vs bits
    assert any("projection" in t for t in titles) and any("bits per weight" in t for t in titles)


def _cell_notebook(sources: list[str]) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return notebook


WIDGET_NOTEBOOK = [
    "from toolkit.figures.static import use_static_fallback\nuse_static_fallback()",
    "from toolkit.notebook.widgets import Dashboard\n"
    "dash = Dashboard(model='tiny-llama', method='wanda', sparsity='50%', runs_dir='runs', generate=True,\n"
    "                 nsamples=4, seqlen=32, eval_seqlen=32, eval_windows=2)\ndash",
    "view = dash.run()\nview.status",
    "from toolkit.figures import run as viz\n"
    "viz.error_heatmap(view.pruned, num_layers=view.num_layers, linears=view.linears)",
    "from IPython.display import HTML\nfrom toolkit.notebook.panels import generations_html\n"
    "HTML(generations_html(view.evals.texts))",
]


def _nbconvert(folder: Path, name: str) -> str:
    """``jupyter nbconvert --to html --execute`` of ``folder/name``; the HTML."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", "--execute", name], cwd=folder,
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PRUNELAB_RUNS": str(folder / "runs"),
                               "PYTHONPATH": str(NOTEBOOKS.parent)})
    assert done.returncode == 0, done.stderr[-2000:]
    return (folder / name).with_suffix(".html").read_text(encoding="utf-8")


IMAGE = '<img alt="No description has been provided for this image" class="" src="data:image/png;base64,'


@pytest.mark.slow
def test_nbconvert_html_shows_the_widget_figures(tmp_path: Path) -> None:
    """A notebook using the dashboard, converted: the figure is an image, the dashboard keeps its images."""
    nbformat.write(_cell_notebook(WIDGET_NOTEBOOK), tmp_path / "widgets.ipynb")
    html = _nbconvert(tmp_path, "widgets.ipynb")
    assert html.count(IMAGE) == 1  # the heat-map cell: a PNG beside the plotly JSON
    assert "prunelab-generations" in html and html.count("tokens/s") >= 10
    # the output under the dashboard holds the finished run's figures as images, for any viewer
    assert "figures of run" in html and html.count("data:image/png;base64,") >= 1 + 2  # heat-map cell + kept ones


@pytest.mark.slow
def test_nbconvert_html_of_a_shipped_notebook_shows_every_figure(tmp_path: Path) -> None:
    shutil.copy(NOTEBOOKS / QUANT, tmp_path / QUANT)  # `toolkit` comes from PYTHONPATH
    html = _nbconvert(tmp_path, QUANT)
    assert html.count(IMAGE) == 5  # the five figures of the notebook, each as a PNG
