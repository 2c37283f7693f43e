"""The notebooks as committed: stored without outputs, or as executed top to bottom, showing what they showed.

A notebook stored with its outputs (:data:`WITH_OUTPUTS`) must be a whole top-to-bottom run with no
error, every figure carrying a static image in its plotly figure's colours (reference lines
included), no progress-bar line, and, where it uses the dashboard, the dashboard's final figures
as an output under it.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tests.notebook.saved_figures import (
    PLOTLY,
    expected_colors,
    figure_outputs,
    output_texts,
    png_has_color,
    png_pixels,
)

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
ALL = sorted(path.name for path in NOTEBOOKS.glob("*.ipynb"))
# committed executed, so every viewer shows them
WITH_OUTPUTS = ("01_quickstart.ipynb", "03_pruning_meets_quantization.ipynb", "05_inside_fista.ipynb")


def _code(name: str) -> list[nbformat.NotebookNode]:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(notebook)
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


@pytest.mark.parametrize("name", ALL)
def test_notebook_is_stored_stripped_or_as_one_whole_run(name: str) -> None:
    code = _code(name)
    stripped = all(not cell.outputs and cell.execution_count is None for cell in code)
    assert stripped != (name in WITH_OUTPUTS), "stored with outputs: list it in WITH_OUTPUTS, or strip it"
    if not stripped:
        assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))  # top to bottom, once
        assert not [o for cell in code for o in cell.outputs if o.get("output_type") == "error"]


@pytest.mark.parametrize("name", WITH_OUTPUTS)
def test_stored_outputs_show_what_the_run_showed(name: str) -> None:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    figures = list(figure_outputs(notebook))
    assert figures
    for index, output in figures:
        assert "image/png" in output["data"], f"cell {index}: no static image beside the plotly figure"
        pixels = png_pixels(output["data"]["image/png"])
        missing = [(what, color) for what, color in expected_colors(output["data"][PLOTLY])
                   if not png_has_color(pixels, color)]
        assert not missing, f"cell {index}: the image lacks {missing}"
    assert not [text[:120] for text in output_texts(notebook) if "0%|" in text or "Loading weights" in text]
    dashboards = [cell for cell in notebook.cells if "Dashboard(" in cell.get("source", "") and cell.get("outputs")]
    for cell in dashboards:
        kept = [o for o in cell.outputs if "figures of run" in o.get("data", {}).get("text/html", "")]
        assert len(kept) == 1 and kept[0]["data"]["text/html"].count('src="data:image/png;base64,') >= 2
