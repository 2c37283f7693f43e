"""Overlays of any number of runs of one model (CONTRIBUTING.md R8), and the mean ± std of repeated runs.

The builders take the plain dicts of :func:`toolkit.compare.overlay.overlay_runs`:

- :func:`layer_overlay_figure`: one line per run over the decoder layers, the layer output error
  (log axis) or the fraction of weights zeroed per layer;
- :func:`quality_figure`: perplexity (log axis) or mean zero-shot accuracy vs achieved sparsity,
  one curve per ``series`` (method, allocation, refinement) over its targets. Runs of one
  configuration that differ only in calibration seed are folded into one point: the mean, with
  error bars of ± one sample standard deviation (n − 1) on both axes.

:func:`mean_std` is that fold; the sweep curves use it too.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from toolkit.figures.run import PALETTE, Spec, _float, base_layout, figure, note, note_figure

HEIGHT = 380


def mean_std(values: Iterable[Any]) -> tuple[float, float, int]:
    """(mean, sample standard deviation with n − 1, n) of the finite values; std is nan below two values.

    >>> mean_std([1.0, 2.0, 3.0, float("nan")])
    (2.0, 1.0, 3)
    """
    finite = [v for v in (_float(x) for x in values) if math.isfinite(v)]
    if not finite:
        return math.nan, math.nan, 0
    return statistics.fmean(finite), statistics.stdev(finite) if len(finite) > 1 else math.nan, len(finite)


def color(index: int) -> str:
    """The palette's ``index``-th colour, cycling."""
    return PALETTE[index % len(PALETTE)]


def layer_overlay_figure(runs: Sequence[Mapping[str, Any]], metric: str = "layer_error", *,
                         revision: Any = None) -> go.Figure:
    """One line per run over the decoder layers: ``layer_error`` (log axis) or ``layer_sparsity``.

    A run has its series' colour (as in :func:`quality_figure`); runs of one series differ by dash. Runs that
    did not measure the error (``layer_error_measured`` False: ``--error none``) are named in a note, not drawn.
    """
    error = metric == "layer_error"
    title = "layer output error per layer" if error else "weights zeroed per layer"
    data, fmt = [], ".3g" if error else ".1%"
    series = list(dict.fromkeys(_series(run) for run in runs))
    unmeasured = [str(run["name"]) for run in runs if error and run.get("layer_error_measured") is False]
    for index, run in enumerate(runs):
        values = [_float(v) for v in run.get(metric) or []]
        if not any(math.isfinite(v) and (v > 0 or not error) for v in values):
            continue
        ys = [v if math.isfinite(v) and (v > 0 or not error) else None for v in values]
        colour = color(series.index(_series(run)))  # the colour of its curve in quality_figure
        dash = DASHES[sum(_series(r) == _series(run) for r in runs[:index]) % len(DASHES)]
        data.append({"type": "scatter", "mode": "lines+markers", "name": str(run["name"]),
                     "x": list(range(len(ys))), "y": ys, "line": {"color": colour, "dash": dash},
                     "marker": {"size": 5, "color": colour}, "connectgaps": False,
                     "hovertemplate": f"{run['name']}<br>layer %{{x}}: %{{y:{fmt}}}<extra></extra>"})
    skipped = f"layer output error not drawn for {', '.join(unmeasured)}: not measured (--error none, or a " \
        "data-free method that runs no calibration)" \
        if unmeasured else ""
    if not data:
        return note_figure(title, skipped or "no per-layer record in these runs", HEIGHT, revision)
    yaxis = ({"title": {"text": "‖Y* − Y‖ / ‖Y‖ (log)"}, "type": "log"} if error else
             {"title": {"text": "fraction zeroed"}, "tickformat": ".0%", "rangemode": "tozero"})
    layout = base_layout(title, HEIGHT, revision, xaxis={"title": {"text": "decoder layer"}}, yaxis=yaxis,
                         legend={"orientation": "h", "y": -0.2},
                         annotations=[note(skipped, y=1.06)] if skipped else [])
    return figure(data, layout)


def quality_figure(runs: Sequence[Mapping[str, Any]], metric: str = "ppl", *, revision: Any = None) -> go.Figure:
    """Perplexity (``ppl``, log axis) or mean zero-shot ``accuracy`` vs achieved sparsity, one curve per series.

    Runs of one ``group`` (same configuration, other seeds) are one point at their mean with error
    bars of ± their sample standard deviation; a dashed line marks the dense model.
    """
    ppl = metric == "ppl"
    title = "perplexity vs sparsity" if ppl else "mean zero-shot accuracy vs sparsity"
    measured = [r for r in runs if math.isfinite(_float(r.get(metric)))]
    series = list(dict.fromkeys(_series(r) for r in runs))  # every run's, so colours match the layer overlays
    data = [_series_trace(name, [r for r in measured if _series(r) == name], metric, color(i))
            for i, name in enumerate(series) if any(_series(r) == name for r in measured)]
    dense = [_float(r.get("dense_ppl" if ppl else "dense_accuracy")) for r in runs]
    dense = [v for v in dense if math.isfinite(v)]
    if dense and data:
        xs = [_float(r.get("achieved_sparsity")) for r in measured]
        data.append({"type": "scatter", "mode": "lines", "name": f"dense ({dense[0]:.{2 if ppl else 3}f})",
                     "x": [0.0, max([v for v in xs if math.isfinite(v)] + [0.7])], "y": [dense[0], dense[0]],
                     "line": {"dash": "dash", "color": "#444"}, "hoverinfo": "skip"})
    if not data:
        what = "perplexity" if ppl else "zero-shot tasks"
        return note_figure(title, f"none of these runs measured {what}", HEIGHT, revision)
    yaxis = ({"title": {"text": "perplexity (log)"}, "type": "log"} if ppl else
             {"title": {"text": "mean zero-shot accuracy"}, "tickformat": ".0%"})
    layout = base_layout(title, HEIGHT, revision, xaxis={"title": {"text": "sparsity (achieved)"}, "tickformat": ".0%"},
                         yaxis=yaxis, legend={"orientation": "h", "y": -0.2})
    return figure(data, layout)


DASHES = ("solid", "dash", "dot", "dashdot", "longdash")  # runs of one series in the layer overlays, in order


def _series(run: Mapping[str, Any]) -> str:
    """The curve a run belongs to: its ``series`` (method, allocation, refinement), else its name."""
    return str(run.get("series") or run["name"])


def fold(points: Sequence[Mapping[str, Any]], key: str, metric: str) -> list[dict[str, Any]]:
    """Points of one curve folded by ``key`` (runs repeated over seeds): mean and std of x and ``metric``, n, labels.

    Returns ``[{"x", "x_std", "y", "y_std", "n", "label", "seeds"}]`` sorted by x; std is 0.0 for a
    point of one run (no spread to draw).
    """
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for point in points:
        groups.setdefault(str(point.get(key)), []).append(point)
    folded = []
    for label, members in groups.items():
        x, x_std, _ = mean_std(p.get("achieved_sparsity") for p in members)
        y, y_std, n = mean_std(p.get(metric) for p in members)
        folded.append({"x": x, "x_std": x_std if n > 1 else 0.0, "y": y, "y_std": y_std if n > 1 else 0.0, "n": n,
                       "label": label, "seeds": [p.get("seed") for p in members]})
    return sorted(folded, key=lambda f: f["x"] if math.isfinite(f["x"]) else math.inf)


def error_bars(folded: Sequence[Mapping[str, Any]], axis: str = "y") -> Spec:
    """Plotly ``error_y`` (``error_x``) of folded points: ± std, shown only when some point has a spread."""
    spread = [float(f[f"{axis}_std"]) for f in folded]
    return {"type": "data", "array": spread, "visible": any(n > 1 for n in (f["n"] for f in folded)),
            "thickness": 1.5, "width": 5}


def _series_trace(name: str, members: Sequence[Mapping[str, Any]], metric: str, colour: str) -> Spec:
    folded = fold(members, "group", metric)
    fmt = ".3g" if metric == "ppl" else ".1%"
    hover = [f"{f['label']}<br>{'mean of ' + str(f['n']) + ' seeds ' + str(f['seeds']) if f['n'] > 1 else 'one run'}"
             for f in folded]
    return {"type": "scatter", "mode": "lines+markers", "name": name, "x": [f["x"] for f in folded],
            "y": [f["y"] for f in folded], "error_y": error_bars(folded), "error_x": error_bars(folded, "x"),
            "line": {"color": colour}, "marker": {"size": 9, "color": colour}, "customdata": hover,
            "hovertemplate": f"%{{customdata}}<br>achieved %{{x:.1%}}<br>{metric} %{{y:{fmt}}}<extra></extra>"}
