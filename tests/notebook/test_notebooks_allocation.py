"""Notebook 07 (allocation, refinement, recovery): stored stripped, run top to bottom on the embedded model (slow)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAME = "07_allocation_refinement_recovery.ipynb"
PLOTLY = "application/vnd.plotly.v1+json"


def test_notebook_is_stored_without_outputs_and_listed() -> None:
    notebook = nbformat.read(NOTEBOOKS / NAME, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)
    assert "assert" in code[-1].source  # the last cell states what the run must show
    assert "quick protocol" in notebook.cells[0].source
    assert f"`{NAME}`" in (NOTEBOOKS.parent / "docs" / "notebooks.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_notebook_runs_top_to_bottom(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbclient import NotebookClient

    monkeypatch.setenv("PRUNELAB_RUNS", str(tmp_path))  # the kernel inherits it: runs go to a temp store
    notebook = nbformat.read(NOTEBOOKS / NAME, as_version=4)
    NotebookClient(notebook, timeout=2400, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
                   ).execute()
    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    assert not [output for output in outputs if output.get("output_type") == "error"]
    titles = [output["data"][PLOTLY]["layout"]["title"]["text"] for output in outputs
              if PLOTLY in output.get("data", {})]
    assert len(titles) == 4, titles  # the per-layer ratios, DSnoT's errors, the perplexities, the recovery loss
    assert titles[0].startswith("per-layer sparsity · owl:5,0.08") and "recovery loss" in titles[3]
