"""The app's "Export" buttons: the plotted figure as PNG, PDF and SVG files for a paper."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.figure_download import export_files
from toolkit.errors import ToolkitError
from toolkit.events import SublayerPruned
from toolkit.figures import run as viz
from toolkit.figures import sweep as viz_sweep


def _plot_data(figure: object) -> object:
    import gradio as gr

    return gr.Plot().postprocess(figure)  # what the browser holds and sends back on click


def test_heatmap_plot_exports_three_valid_files(tmp_path: Path) -> None:
    events = [SublayerPruned(layer=0, name="mlp.down_proj", shape=[4, 4], sparsity=0.5, rel_error=0.01,
                             rel_error_dense=0.0, damping=0.0, seconds=0.1)]
    written = export_files(_plot_data(viz.error_heatmap(events, num_layers=2, linears=["mlp.down_proj"])),
                           "heatmap", tmp_path)
    assert [Path(p).name for p in written] == ["heatmap.png", "heatmap.pdf", "heatmap.svg"]
    png, pdf, svg = (Path(p).read_bytes() for p in written)
    assert png.startswith(b"\x89PNG") and pdf.startswith(b"%PDF") and b"<svg" in svg[:2000]


def test_sweep_plot_as_plotly_json_and_empty_plot_refused(tmp_path: Path) -> None:
    points = [{"method": "wanda", "sparsity": "50%", "achieved_sparsity": 0.5, "ppl": 30.0}]
    written = export_files(viz_sweep.sweep_figure(points, dense_ppl=20.0).to_json(), "sweep", tmp_path)
    assert all(Path(p).stat().st_size > 0 for p in written)
    with pytest.raises(ToolkitError, match="nothing to export yet"):
        export_files(_plot_data(viz_sweep.sweep_figure([])), "sweep", tmp_path / "empty")
    assert not (tmp_path / "empty").exists()


def test_app_has_the_export_buttons(tmp_path: Path) -> None:
    from app.app import build_app

    demo = build_app(default_model="tiny-llama", runs_dir=str(tmp_path))
    ids = {getattr(block, "elem_id", None) for block in demo.blocks.values()}
    assert {"export-heatmap", "export-heatmap-files", "export-sweep", "export-sweep-files"} <= ids
