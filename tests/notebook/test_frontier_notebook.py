"""notebooks/08_frontier.ipynb runs top to bottom offline (no model): the committed frontier, then the run store's."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tests.app.test_frontier_view import _store

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "08_frontier.ipynb"
PLOTLY = "application/vnd.plotly.v1+json"


@pytest.mark.slow
def test_the_frontier_notebook_draws_the_committed_records_and_the_run_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbclient import NotebookClient

    _store(tmp_path)  # three runs: two timed (one on the front), one stored dense without a speed
    monkeypatch.setenv("PRUNELAB_RUNS", str(tmp_path))  # the kernel inherits it
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    assert not [output for output in outputs if output.get("output_type") == "error"]
    figures = [output["data"][PLOTLY] for output in outputs if PLOTLY in output.get("data", {})]
    assert len(figures) == 2 and all("image/png" in o["data"] for o in outputs if PLOTLY in o.get("data", {}))
    store = figures[-1]
    assert any(trace.get("name") == "Pareto front" for trace in store["data"])
    texts = " ".join(str(o.get("data", {}).get("text/markdown", "")) + str(o.get("text", "")) for o in outputs)
    assert "On the perplexity–speed front: dense, numerical structured:20%" in texts


def test_the_frontier_notebook_is_listed_and_stored_without_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert not [cell for cell in notebook.cells if cell.cell_type == "code" and cell.outputs]
    assert f"`{NOTEBOOK.name}`" in (NOTEBOOK.parents[1] / "docs" / "notebooks.md").read_text(encoding="utf-8")
