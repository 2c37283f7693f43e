"""Plotly figures of the Lesson (CONTRIBUTING.md R8), torch-free.

Pure functions of :class:`~toolkit.teach.lesson_view.MethodMaterial`.

- :func:`heatmaps_figure`: every method's error heat-map (decoder layer × linear) side by side on one
  fixed log colour scale, so equal colours are equal errors across methods.
- :func:`layer_errors_figure`: every method's layer output error per decoder layer (log axis).
- :func:`perplexity_bars`: perplexity after pruning, one bar per method, the dense model dashed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from toolkit.figures.masks import side_by_side
from toolkit.figures.run import (
    ERROR_BOUNDS,
    PALETTE,
    _log_colorbar,
    base_layout,
    figure,
    gaps,
    heatmap_height,
    log_scale,
    note,
    note_figure,
    panel_title,
    short_names,
)
from toolkit.live.view import error_matrix
from toolkit.teach.lesson_view import MethodMaterial


def heatmaps_figure(methods: Sequence[MethodMaterial], *, bounds: tuple[float, float] = ERROR_BOUNDS,
                    waiting: str = "the lesson's runs appear here") -> go.Figure:
    """Relative reconstruction error ‖ΔW·X‖/‖W·X‖ of every linear, one heat-map per method, shared log scale.

    Drawn while the lesson runs: a method whose run has not reached a layer yet shows an empty grid
    of the model's layers × linears (known once any run started), its cells filling in as they are pruned.
    ``waiting`` is the note shown before any run has started.
    """
    title = "relative reconstruction error per linear (log, fixed scale)"
    rows = max((m.num_layers or (1 + max((e.layer for e in m.pruned), default=-1)) for m in methods), default=0)
    linears = next((m.linears for m in methods if m.linears), [])
    if rows <= 0 or not linears:
        return note_figure(title, waiting, 420)
    domains = side_by_side(len(methods))
    data, titles = [], []
    layout = base_layout(title, heatmap_height(rows) + 40, margin={"l": 60, "r": 20, "t": 80, "b": 60})
    low, high = (math.log10(b) for b in bounds)
    for index, method in enumerate(methods, 1):
        matrix, columns = error_matrix(method.pruned, rows, method.linears or linears)
        suffix = str(index) if index > 1 else ""
        data.append({"type": "heatmap", "z": [log_scale(row, bounds) for row in matrix], "x": short_names(columns),
                     "y": list(range(len(matrix))), "customdata": [gaps(row) for row in matrix],
                     "colorscale": "Viridis", "zmin": low, "zmax": high, "xgap": 1, "ygap": 1,
                     "showscale": index == len(methods), "colorbar": _log_colorbar(bounds), "name": method.label,
                     "xaxis": f"x{suffix}", "yaxis": f"y{suffix}", "hoverongaps": False,
                     "hovertemplate": f"{method.label}<br>layer %{{y}} · %{{x}}<br>rel. error "
                                      "%{customdata:.4g}<extra></extra>"})
        layout[f"xaxis{suffix}"] = {"domain": domains[index - 1], "anchor": f"y{suffix}", "tickangle": -60,
                                    "type": "category", "categoryorder": "array",  # ticks before any cell is drawn
                                    "categoryarray": short_names(columns), "range": [-0.5, len(columns) - 0.5]}
        layout[f"yaxis{suffix}"] = {"anchor": f"x{suffix}", "autorange": "reversed", "range": [rows - 0.5, -0.5],
                                    **({"matches": "y"} if index > 1 else {"title": {"text": "decoder layer"}})}
        done, cells = len(method.pruned), rows * len(columns)
        state = "" if done >= cells else (" · waiting" if not done else f" · {done} of {cells}")
        titles.append(panel_title(f"{method.label}{state}", sum(domains[index - 1]) / 2, 1.0))
    layout["annotations"] = titles
    return figure(data, layout)


def layer_errors_figure(methods: Sequence[MethodMaterial]) -> go.Figure:
    """Layer output error ‖f̂(x) − f(x)‖/‖f(x)‖ per decoder layer, one line per method, log axis."""
    title = "layer output error vs dense (log)"
    if not any(m.layers for m in methods):
        return note_figure(title, "the lesson's runs appear here", 420)
    data = [{"type": "scatter", "mode": "lines+markers", "name": m.label, "x": [e.layer for e in m.layers],
             "y": gaps([e.output_rel_error for e in m.layers]), "line": {"color": PALETTE[i % len(PALETTE)]},
             "hovertemplate": f"{m.label}<br>layer %{{x}}<br>output rel. error %{{y:.4g}}<extra></extra>"}
            for i, m in enumerate(methods) if m.layers and not _unmeasured(m)]
    unmeasured = [m.label for m in methods if _unmeasured(m)]  # a stored run reused from --error none
    rows = max((m.num_layers for m in methods), default=0)  # a fixed axis: the lines grow as the layers finish
    xaxis = {"title": {"text": "decoder layer"}, **({"range": [-0.5, rows - 0.5]} if rows else {})}
    layout = base_layout(title, 420, xaxis=xaxis, yaxis={"title": {"text": "relative error"}, "type": "log"})
    if unmeasured:
        layout["annotations"] = [note(f"not drawn for {', '.join(unmeasured)}: layer output error not measured, "
                                      "the run used --error none or no calibration", y=1.06)]
    return figure(data, layout)


def _unmeasured(material: MethodMaterial) -> bool:
    """True when every finished layer of ``material`` has no output error (``--error none``, or a data-free run)."""
    return bool(material.layers) and all(e.output_rel_error is None for e in material.layers)


def perplexity_bars(methods: Sequence[MethodMaterial]) -> go.Figure:
    """Perplexity of each pruned model (bars, log axis), the dense model's as a dashed line.

    Every method keeps its place on the axis; a bar appears when its run has measured it.
    """
    title = "perplexity after pruning at 50% (lower is better)"
    measured = [m for m in methods if math.isfinite(m.ppl)]
    dense = next((m.dense_ppl for m in methods if math.isfinite(m.dense_ppl)), math.nan)
    if not measured and not math.isfinite(dense):
        return note_figure(title, "the lesson's runs appear here", 380)
    labels = [m.label for m in methods]
    data: list[dict] = [{"type": "bar", "x": [m.label for m in measured], "y": [m.ppl for m in measured],
                         "name": "pruned", "marker": {"color": [PALETTE[methods.index(m) % len(PALETTE)]
                                                                for m in measured]},
                         "text": [f"{m.ppl:.1f}" for m in measured], "textposition": "outside",
                         "hovertemplate": "%{x}<br>perplexity %{y:.2f}<extra></extra>"}]
    if math.isfinite(dense):
        data.append({"type": "scatter", "mode": "lines", "x": [labels[0], labels[-1]],
                     "y": [dense, dense], "name": f"dense ({dense:.1f})", "line": {"dash": "dash", "color": "#444"}})
    layout = base_layout(title, 380, yaxis={"title": {"text": "perplexity (log)"}, "type": "log"},
                         xaxis={"categoryorder": "array", "categoryarray": labels, "type": "category",
                                "range": [-0.5, len(labels) - 0.5]}, showlegend=True)
    return figure(data, layout)
