"""The notebooks run top to bottom on the embedded model (nbclient; slow) and are stored stripped."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = ["01_quickstart.ipynb", "02_methods_compared.ipynb",  # in order: 02 reuses 01's Wanda run
         "04_removing_heads_and_channels.ipynb"]
QUANT = "03_pruning_meets_quantization.ipynb"  # tiny-llama and one synthetic layer: fast, not marked slow
PLOTLY = "application/vnd.plotly.v1+json"


@pytest.mark.parametrize("name", [*NAMES, QUANT])
def test_notebook_is_stored_without_outputs(name: str) -> None:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)


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
