"""The notebook Dashboard draws a depth run's layer scores in its structure row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolkit.notebook.widgets import Dashboard


def test_dashboard_draws_the_layer_scores_of_a_depth_run(tmp_path: Path) -> None:
    dash = Dashboard(model="tiny-llama", method="depth", sparsity="structured:1 layer", runs_dir=str(tmp_path),
                     nsamples=4, seqlen=32, eval_seqlen=32, eval_windows=1)
    view = dash.run(eval_data=None)
    assert view.status == "finished" and dash.structure.layout.display == "flex"
    depth = view.structure.depth
    assert depth is not None and len(depth.removed) == 1
    figure: Any = dash.figures["depth"]
    bars = {trace.name: list(trace.x) for trace in figure.data}
    assert bars["removed layer"] == depth.removed and len(bars["kept layer"]) == 1
