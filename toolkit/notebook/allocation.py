"""The per-layer sparsity of stored runs in a notebook (the Run view's allocation panels, for a finished run).

- :func:`allocation_plot`: each decoder layer's sparsity of a run (uniform, OWL or a ratio file) with
  the target dashed and OWL's outlier ratio LOD_l on the right axis
  (:func:`toolkit.figures.allocation.allocation_view_figure`, the panel the app and the
  :class:`~toolkit.notebook.widgets.Dashboard` draw live).
- :func:`refine_plot`: DSnoT's error per layer before and after the swaps, from the run's events.

A run is a record, a run folder or a run id under ``runs_dir``. Reads the run store only; never
imports torch (CONTRIBUTING.md R7).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolkit.api import open_run
from toolkit.errors import ToolkitError
from toolkit.events import MaskRefined
from toolkit.figures.allocation import allocation_view_figure, refine_figure
from toolkit.live.allocation import AllocationView, allocation_from_result
from toolkit.store.runs import RunRecord

__all__ = ["allocation_plot", "refine_plot"]


def _open(run: RunRecord | str | Path, runs_dir: str | Path) -> RunRecord:
    if isinstance(run, RunRecord):
        return run
    path = Path(run)
    return open_run(path if path.is_dir() else Path(runs_dir) / str(run))


def allocation_plot(run: RunRecord | str | Path, *, runs_dir: str | Path = "runs") -> Any:
    """The per-layer sparsity bar chart of a finished run (its result.json); ToolkitError for an unfinished one."""
    record = _open(run, runs_dir)
    if record.status != "finished" or not isinstance(record.result, dict):
        raise ToolkitError(f"run {record.run_id} is {record.status}: its per-layer sparsity is recorded when it "
                           "finishes; pick a finished run")
    view = allocation_from_result(record.result)
    if not view.num_layers:  # a result without per-layer records: the events say how many layers there are
        view = AllocationView()
        for event in record.events():
            view.apply(event)
    figure = allocation_view_figure(view, revision=record.run_id)
    title = figure.to_dict()["layout"]["title"]["text"]
    return figure.update_layout(title_text=f"{title} · {record.config.get('method', '')} · {record.run_id}")


def refine_plot(run: RunRecord | str | Path, *, runs_dir: str | Path = "runs") -> Any:
    """DSnoT's per-layer error before and after the swaps (a note for a run without ``refine``)."""
    record = _open(run, runs_dir)
    refined = [event for event in record.events() if isinstance(event, MaskRefined)]
    return refine_figure(refined, revision=record.run_id)
