"""Sweep curves (CONTRIBUTING.md R8): sparsity vs perplexity (or mean zero-shot accuracy) per method and allocation."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from toolkit.figures.overlay import error_bars, fold
from toolkit.figures.run import Spec, _finite, _float, base_layout, figure, method_color, note_figure


def sweep_figure(points: Sequence[Mapping[str, Any]], *, dense_ppl: float | None = None,
                 title: str = "perplexity vs sparsity", revision: Any = None, metric: str = "ppl") -> go.Figure:
    """Sparsity (achieved) vs perplexity, one line per method; n:m points as separate diamonds.

    ``points`` are dicts (:meth:`toolkit.sweep.SweepPoint.to_dict`) with ``method``, ``sparsity``
    (the asked label, shown on hover), ``pattern`` (the target's kind: ``unstructured`` | ``nm`` |
    ``structured`` | ``none``; points without one are drawn as unstructured), ``achieved_sparsity``
    and ``ppl`` (nan / None when not measured). ``dense_ppl`` draws a dashed reference line. The
    perplexity axis is logarithmic. With ``metric="accuracy"`` the y values are the points'
    ``accuracy`` (mean zero-shot accuracy over tasks) on a linear axis, and ``dense_ppl`` is the
    dense model's mean accuracy. Points with an ``allocation`` other than uniform (OWL, a ratio
    file) get a line of their own per method, in the method's colour with a dash of their own.
    Points of one sparsity repeated over calibration seeds (a ``seed`` each) are drawn once, at
    their mean, with error bars of ± their sample standard deviation. n:m points run with permuted
    inputs (``permute`` true, label ``2:4+perm``) are open diamonds, a trace of their own.
    """
    methods = list(dict.fromkeys(str(p["method"]) for p in points))
    spreads = list(dict.fromkeys([UNIFORM, *(_allocation(p) for p in points)]))
    data = []
    for method, spread in itertools.product(methods, spreads):
        mine = [p for p in points if p["method"] == method and _allocation(p) == spread
                and math.isfinite(_float(p.get(metric)))]
        for pattern in PATTERN_STYLES:
            group = sorted((p for p in mine if _pattern(p) == pattern),
                           key=lambda p: _float(p.get("achieved_sparsity")))
            if group:
                data.append(_styled(_sweep_trace(method, pattern, group, method_color(method, methods), metric),
                                    spread, spreads))
    if dense_ppl is not None and math.isfinite(dense_ppl):
        xs = _finite([_float(p.get("achieved_sparsity")) for p in points])
        data.append({"type": "scatter", "mode": "lines", "name": f"dense ({dense_ppl:.{2 if metric == 'ppl' else 3}f})",
                     "x": [0.0, max([*xs, 0.7])], "y": [dense_ppl, dense_ppl],
                     "line": {"dash": "dash", "color": "#444"}})
    if not data:
        return note_figure(title, "points appear as the runs finish", 420, revision)
    yaxis = {"title": {"text": "perplexity (log)"}, "type": "log"} if metric == "ppl" else \
        {"title": {"text": "mean zero-shot accuracy"}, "tickformat": ".0%"}
    layout = base_layout(title, 420, revision, xaxis={"title": {"text": "sparsity (achieved)"}, "tickformat": ".0%"},
                         yaxis=yaxis)
    return figure(data, layout)


PATTERN_STYLES = {  # pattern → (marker, line dash or None for markers only, legend suffix)
    "unstructured": ("circle", "solid", ""), "structured": ("square", "dot", " (structured)"),
    "nm": ("diamond", None, " (n:m)"), "nm+perm": ("diamond-open", None, " (n:m, permuted)"),
    "none": ("star", None, " (no sparsity)"),
}


def _sweep_trace(method: str, pattern: str, group: list[Mapping[str, Any]], color: str, metric: str) -> Spec:
    """One curve; points of one sparsity run with several seeds are their mean with ± std error bars."""
    symbol, dash, suffix = PATTERN_STYLES[pattern]
    folded = fold(group, "sparsity", metric)
    labels = [str(f["label"]) for f in folded]
    hover = [f"{f['label']}" + (f" · mean ± std of {f['n']} seeds {f['seeds']}" if f["n"] > 1 else "") for f in folded]
    trace = {"type": "scatter", "name": method + suffix, "legendgroup": method,
             "x": [f["x"] for f in folded], "y": [f["y"] for f in folded], "error_y": error_bars(folded),
             "marker": {"symbol": symbol, "size": 9 if dash else 12, "color": color}, "customdata": hover,
             "hovertemplate": f"{method} %{{customdata}}<br>achieved %{{x:.1%}}<br>{metric} %{{y:.3f}}<extra></extra>"}
    if dash:
        trace.update(mode="lines+markers", line={"dash": dash, "color": color})
    else:
        trace.update(mode="markers+text", text=labels, textposition="top center")
    return trace


UNIFORM = "uniform"
ALLOCATION_DASHES = ("dash", "dashdot", "longdash")  # the lines of non-uniform allocations, in order of appearance


def _allocation(point: Mapping[str, Any]) -> str:
    """The point's allocation label (points from before allocation existed are uniform)."""
    return str(point.get("allocation") or UNIFORM)


def _styled(trace: Spec, spread: str, spreads: Sequence[str]) -> Spec:
    """A non-uniform allocation's trace: named after it, triangles, and a dash of its own."""
    if spread == UNIFORM:
        return trace
    trace.update(name=f"{trace['name']} · {spread}", legendgroup=f"{trace['legendgroup']} {spread}")
    trace["marker"]["symbol"] = "triangle-up"
    if "line" in trace:
        trace["line"]["dash"] = ALLOCATION_DASHES[(list(spreads).index(spread) - 1) % len(ALLOCATION_DASHES)]
    return trace


def _pattern(point: Mapping[str, Any]) -> str:
    pattern = point.get("pattern")
    if pattern == "nm" and point.get("permute"):
        return "nm+perm"
    return pattern if pattern in PATTERN_STYLES else "unstructured"
