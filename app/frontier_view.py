"""The Sweep tab's frontier view: the run store's outputs as perplexity against decode speed, size as the marker.

Every finished run with a perplexity is a point of :func:`toolkit.figures.frontier.frontier_figure`
(the figure of docs/results.md and ``notebooks/08_frontier.ipynb``), drawn where its ``result.json``
holds a decode speed measured in the run (``bought.speed``: a run that shrank the model, or a
recovery of one); the
others are listed under it as not measured. Runs of the model and evaluation protocol of the
newest evaluated run are drawn (:func:`toolkit.figures.frontier_runs.store_frontier`); the summary
names the outputs on the Pareto front. A finished sweep redraws it; **Refresh** reads the store
again (a run in another tab adds runs).
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from app import howto
from app.howto import Plot
from toolkit.figures.frontier import frontier_figure
from toolkit.figures.frontier_runs import store_frontier, summary_lines
from toolkit.store.runs import list_runs

TITLE = "frontier of the run store: perplexity vs decode speed (marker area ∝ bytes)"
INTRO = ("**Frontier of the run store**: which compressed model is fastest at the quality you can accept? "
         "**Refresh frontier** reads the store again.")


def frontier_view(runs_dir: str) -> tuple[go.Figure, str]:
    """The figure and the summary (markdown) of the runs in ``runs_dir``."""
    frontier = store_frontier(list_runs(runs_dir))
    return (frontier_figure(frontier.points, title=TITLE, revision="frontier"),
            "\n\n".join(summary_lines(frontier)))


def build(gr: Any, *, runs_dir: str) -> dict[str, Any]:
    """Lay the frontier view out inside the current column and wire its Refresh button."""
    figure, summary = frontier_view(runs_dir)
    gr.Markdown(INTRO, elem_id="sweep-frontier-intro")
    plot = gr.Plot(figure, show_label=False, elem_id="sweep-frontier")
    howto.accordions(gr, "sweep", Plot.FRONTIER)
    text = gr.Markdown(summary, elem_id="sweep-frontier-summary")
    refresh = gr.Button("Refresh frontier", size="sm", elem_id="sweep-frontier-refresh")
    refresh.click(lambda: frontier_view(runs_dir), inputs=None, outputs=[plot, text], concurrency_limit=4,
                  show_progress="minimal")
    return {"frontier": plot, "frontier_summary": text}
