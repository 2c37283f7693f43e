"""Notebooks 05 (inside FISTAPruner) and 06 (n:m and structure) run top to bottom (slow)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = ["05_inside_fista.ipynb", "06_nm_and_structure.ipynb"]
PLOTLY = "application/vnd.plotly.v1+json"
FIGURES = {"05_inside_fista.ipynb": 5, "06_nm_and_structure.ipynb": 4}  # plotly figures each one draws


@pytest.mark.parametrize("name", NAMES)
def test_notebook_ends_with_what_the_run_must_show(name: str) -> None:
    """How it is stored (stripped, or executed with its outputs): test_stored_notebooks.py."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and "assert" in code[-1].source


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom_on_one_thread(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbclient import NotebookClient

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the kernel inherits it
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
                   ).execute()
    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    assert not [output for output in outputs if output.get("output_type") == "error"]
    assert len([output for output in outputs if PLOTLY in output.get("data", {})]) == FIGURES[name]
