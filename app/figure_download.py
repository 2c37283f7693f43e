"""An "Export figure" button under a plot: the shown figure in paper style as PNG, PDF and SVG.

The plot's current value (gradio's ``PlotData``: the plotly JSON the browser draws) is redrawn by
:func:`toolkit.figures.paper.save_figure`; the files land in a fresh temporary folder that gradio
serves for download.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from toolkit.errors import ToolkitError
from toolkit.figures.paper import save_figure


def export_files(plot: Any, name: str, folder: str | Path | None = None) -> list[str]:
    """Files of the figure in ``plot`` (a ``PlotData``, its dict, or plotly JSON), named ``name``.png/.pdf/.svg.

    Raises :class:`ToolkitError` when there is no plotly figure to export (nothing drawn yet).
    """
    payload = plot.model_dump() if hasattr(plot, "model_dump") else plot
    if isinstance(payload, dict) and "plot" in payload:
        if payload.get("type") != "plotly":
            raise ToolkitError(f"only plotly figures can be exported, this plot is {payload.get('type')}")
        payload = payload["plot"]
    spec = json.loads(payload) if isinstance(payload, str) else payload
    if not isinstance(spec, dict) or not spec.get("data"):
        raise ToolkitError("nothing to export yet: the figure is empty; run first, then export")
    target = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="prunelab-figure-"))
    return [str(path) for path in save_figure(spec, target / name)]


def export_button(gr: Any, plot: Any, name: str) -> Any:
    """A button and a file list under ``plot``; clicking writes the shown figure as PNG, PDF and SVG."""
    with gr.Row():
        button = gr.Button(f"Export {name} (PNG, PDF, SVG)", size="sm", elem_id=f"export-{name}")
        files = gr.File(label=f"{name} for a paper", file_count="multiple", interactive=False,
                        elem_id=f"export-{name}-files", height=80, visible=False)  # shown with its files

    def export(value: Any) -> Any:
        try:
            made = export_files(value, name)
        except ToolkitError as exc:
            gr.Warning(str(exc))
            made = []
        return gr.update(value=made, visible=bool(made))

    button.click(export, inputs=plot, outputs=files, concurrency_limit=4, show_progress="minimal")
    return files
