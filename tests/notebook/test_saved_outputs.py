"""A notebook executed and saved keeps what it showed (slow: a kernel runs the dashboard on tiny-llama).

Read back from the saved .ipynb: every figure output carries a PNG in the colours of its plotly
figure (bars, lines, reference lines), no output holds a progress-bar line, the dashboard's final
figures are a regular output under it, and the saved widget state holds the final heat-map.
"""

from __future__ import annotations

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

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
CELLS = [
    "import os, pathlib\nRUNS = os.environ['PRUNELAB_RUNS']\n"
    "from toolkit.figures.static import use_static_fallback\nfrom toolkit.notebook.quiet import quiet_progress_bars\n"
    "use_static_fallback()\nquiet_progress_bars()",
    "from toolkit.notebook.widgets import Dashboard\n"
    "dash = Dashboard(model='tiny-llama', method='wanda', sparsity='50%', runs_dir=RUNS,\n"
    "                 nsamples=4, seqlen=32, eval_seqlen=32, eval_windows=2)\ndash",
    "view = dash.run(save_model=True)\nview.status",
    "import plotly.graph_objects as go\n"
    "fig = go.Figure(go.Bar(x=['uniform', 'owl', 'owl+dsnot'], y=[3, 2, 1],\n"
    "                       marker_color=['#636efa', '#EF553B', '#00cc96']))\n"
    "fig.add_hline(y=1.5, line_dash='dash', line_color='#2a3f5f', annotation_text='dense 1.50')\nfig",
    "fig = go.Figure()\nfor name in ('rtn', 'gptq', 'awq'):\n"
    "    fig.add_trace(go.Scatter(x=[2, 3, 4], y=[len(name), 2, 1], mode='lines+markers', name=name))\nfig",
    "from IPython.display import display\nfor figure in dash.current_figures().values():\n    display(figure)",
    "import toolkit\nmodel = toolkit.load_model(str(pathlib.Path(RUNS) / view.run_id / 'model'))",
]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> nbformat.NotebookNode:
    """The notebook of :data:`CELLS`, executed by nbclient, written and read back."""
    import os

    from nbclient import NotebookClient

    folder = tmp_path_factory.mktemp("saved-notebook")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    env = {"PRUNELAB_RUNS": str(folder / "runs"), "OMP_NUM_THREADS": "1"}
    old = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # the kernel inherits them
    try:
        NotebookClient(notebook, timeout=900, kernel_name="python3",
                       resources={"metadata": {"path": str(folder)}}).execute()
    finally:
        for key, value in old.items():
            if value is None:
                del os.environ[key]
            else:
                os.environ[key] = value
    nbformat.write(notebook, folder / "saved.ipynb")
    return nbformat.read(folder / "saved.ipynb", as_version=4)


@pytest.mark.slow
def test_it_runs_without_errors(saved: nbformat.NotebookNode) -> None:
    errors = [o for cell in saved.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors


@pytest.mark.slow
def test_every_figure_keeps_its_colours_and_lines(saved: nbformat.NotebookNode) -> None:
    figures = list(figure_outputs(saved))
    live = len(saved.cells[5].outputs)
    assert live >= 2 and len(figures) == 2 + live  # the two plain figures and the dashboard's final ones
    for index, output in figures:
        assert "image/png" in output["data"], f"cell {index}: no static image beside the plotly figure"
        pixels = png_pixels(output["data"]["image/png"])
        missing = [(what, color) for what, color in expected_colors(output["data"][PLOTLY])
                   if not png_has_color(pixels, color)]
        assert not missing, f"cell {index}: the image lacks {missing}"
    bars = figures[0][1]["data"][PLOTLY]
    assert len(expected_colors(bars)) == 4  # three bar colours and the dashed reference line


@pytest.mark.slow
def test_no_output_keeps_a_progress_bar(saved: nbformat.NotebookNode) -> None:
    stale = [text[:200] for text in output_texts(saved) if "0%|" in text or "Loading weights" in text]
    assert not stale


@pytest.mark.slow
def test_the_dashboard_keeps_its_final_figures(saved: nbformat.NotebookNode) -> None:
    outputs = saved.cells[1].outputs
    assert "application/vnd.jupyter.widget-view+json" in outputs[0]["data"]
    kept = [o for o in outputs[1:] if "figures of run" in o.get("data", {}).get("text/html", "")]
    assert len(kept) == 1  # a regular output every viewer shows, written when the run ended
    assert kept[0]["data"]["text/html"].count('src="data:image/png;base64,') == len(saved.cells[5].outputs)
    state = saved.metadata["widgets"][WIDGET_STATE]["state"]
    heatmaps = [trace for model in state.values() for trace in model["state"].get("_widget_data", [])
                if trace.get("type") == "heatmap"]
    assert heatmaps and all(trace.get("z") for trace in heatmaps)  # the saved state holds the final heat-map


def test_the_check_finds_a_colour_the_image_lacks() -> None:
    """The colour check itself: a one-colour image has its colour and not another."""
    import numpy as np

    pixels = np.full((20, 20, 3), (99, 110, 250), dtype=np.uint8)
    assert png_has_color(pixels, "#636efa") and not png_has_color(pixels, "#EF553B")
    spec = {"data": [{"type": "bar", "y": [1]}, {"type": "scatter", "y": [1], "line": {"color": "#444"}}],
            "layout": {"shapes": [{"type": "line", "line": {"color": "#2a3f5f"}}]}}
    assert [color for _, color in expected_colors(spec)] == ["#636efa", "#444444", "#2a3f5f"]
