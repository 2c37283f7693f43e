"""Plotly figure builders for a run's events (CONTRIBUTING.md R8): pure functions, no I/O, no torch.

Each builder takes the events of one kind (as kept by :class:`toolkit.live.view.RunView`) and returns
a ``plotly.graph_objects.Figure``; the Gradio app and the notebook widgets draw the same figures.
Mask figures live in :mod:`toolkit.figures.masks`, sweep curves in :mod:`toolkit.figures.sweep`.

- :func:`error_heatmap`: relative reconstruction error, decoder layer × linear (SublayerPruned).
- :func:`layer_error_figure`: the layer output error per decoder layer (LayerDone).
- :func:`convergence_figure`: a solver's objective per iteration (SolverStep), or Thanos' error
  per block (BlockStep).
- :func:`lambda_figure`: FISTAPruner's λ bisection (LambdaStep): λ within its bounds, the
  rounding-error ratio E_round/E_total against ξ, the sparsity before rounding.

Figures are written as plain dicts and wrapped without plotly's property validation
(:func:`figure`): validation costs 30–50 ms a figure, too slow to redraw a live run several times
a second beside the pruning thread. The tests validate every builder's output instead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from toolkit.events import BlockStep, LambdaStep, LayerDone, SolverStep, SublayerPruned
from toolkit.figures.log_ticks import readable_
from toolkit.live.view import error_matrix

PALETTE = ("#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880", "#FF97FF",
           "#FECB52")  # plotly's qualitative.Plotly
HEIGHT = 340
LAMBDA_HEIGHT = 500  # three stacked panels
ERROR_BOUNDS = (1e-4, 1.0)  # the error heat-map's fixed colour range (relative error, log scale)
Spec = dict[str, Any]


AXIS_STYLE = {"gridcolor": "#EBF0F8", "linecolor": "#EBF0F8", "zerolinecolor": "#EBF0F8", "automargin": True}
PAGE_STYLE = {"paper_bgcolor": "white", "plot_bgcolor": "white", "font": {"color": "#2a3f5f"},
              "colorway": list(PALETTE), "hoverlabel": {"align": "left"}}


def figure(data: list[Spec], layout: Spec) -> go.Figure:
    """A Figure from plain trace and layout dicts, skipping plotly's slow validation (see module doc).

    The look of plotly's "plotly_white" is set directly rather than through its template: a
    template makes each browser redraw (Plotly.react) 5–10 × slower.
    """
    layout = {"template": {"layout": {}}, **PAGE_STYLE, **_compact(layout)}
    for key in [k for k in layout if k.startswith(("xaxis", "yaxis"))] or ["xaxis", "yaxis"]:
        layout[key] = {**AXIS_STYLE, **layout.get(key, {})}
    for key in ("xaxis", "yaxis"):
        layout.setdefault(key, dict(AXIS_STYLE))
    readable_(layout, data)  # every log axis labelled at each decade (log_ticks.py)
    return go.Figure({"data": data, "layout": layout}, _validate=False)


def _compact(layout: Spec) -> Spec:
    """Drop None-valued settings (an option left unset) at the top two levels of a layout."""
    return {key: {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else value
            for key, value in layout.items() if value is not None}


def base_layout(title: str, height: int = HEIGHT, revision: Any = None, subtitle: str = "", **extra: Any) -> Spec:
    """Title top-left, compact margins; ``uirevision`` keeps the user's zoom across live redraws.

    A ``subtitle`` goes under the title in a smaller font, with a taller top margin for it: a narrow panel
    clips one long title line.
    """
    text = f"{title}<br><span style='font-size:11px'>{subtitle}</span>" if subtitle else title
    return {"title": {"text": text, "x": 0.01, "font": {"size": 14}}, "height": height,
            "margin": {"l": 60, "r": 20, "t": 58 if subtitle else 44, "b": 44},
            "uirevision": revision if revision is not None else text, **extra}


def note_figure(title: str, text: str, height: int = HEIGHT, revision: Any = None) -> go.Figure:
    """An empty figure with a centred grey note (nothing to draw yet)."""
    hidden = {"showticklabels": False, "showgrid": False, "zeroline": False}
    return figure([], base_layout(title, height, revision, xaxis=hidden, yaxis=hidden, annotations=[note(text)]))


def note(text: str, x: float = 0.5, y: float = 0.5) -> Spec:
    """A grey annotation in paper coordinates."""
    return {"text": text, "x": x, "y": y, "xref": "paper", "yref": "paper", "showarrow": False,
            "font": {"color": "#888", "size": 13}}


def stacked(count: int, gap: float = 0.07) -> list[list[float]]:
    """Vertical domains of ``count`` panels sharing the x axis, top first."""
    height = (1.0 - gap * (count - 1)) / count
    return [[max(0.0, round(1.0 - (i + 1) * height - i * gap, 6)), min(1.0, round(1.0 - i * height - i * gap, 6))]
            for i in range(count)]


def panel_title(text: str, x: float, y: float) -> Spec:
    """A panel's title just above its domain (what make_subplots' subplot_titles draws)."""
    return {"text": text, "x": x, "y": y, "xref": "paper", "yref": "paper", "xanchor": "center",
            "yanchor": "bottom", "showarrow": False, "font": {"size": 12}}


def short_names(names: Sequence[str]) -> list[str]:
    """Last dotted component of each name (``self_attn.q_proj`` → ``q_proj``) unless that collides."""
    short = [name.rsplit(".", 1)[-1] for name in names]
    return short if len(set(short)) == len(short) else list(names)


def method_color(method: str, methods: Sequence[str]) -> str:
    """The colour of ``method`` given the ordered list of methods on the chart."""
    index = list(methods).index(method) if method in methods else len(methods)
    return PALETTE[index % len(PALETTE)]


def _finite(values: Sequence[Any]) -> list[float]:
    return [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def gaps(values: Sequence[Any]) -> list[float | None]:
    """Floats with nan/inf as None (JSON null: a gap in the line)."""
    return [v if math.isfinite(v) else None for v in (_float(x) for x in values)]


ERROR_NOT_MEASURED = "layer output error not drawn: not measured, the run used --error none"
NO_CALIBRATION = "layer output error not drawn: no calibration data, the method reads the weights alone"
WEIGHT_ERROR_TITLE = "relative weight error ‖ΔW‖/‖W‖ (no calibration data)"


def error_not_measured(protocol: dict[str, Any]) -> str:
    """Why a run has no layer output error: a data-free run (its protocol's calibration unused), or --error none."""
    return NO_CALIBRATION if (protocol.get("calibration") or {}).get("used") is False else ERROR_NOT_MEASURED
MAX_POINTS = 600  # a live trace is thinned to at most this many points: a redraw must stay cheap


def thin(items: Sequence[Any], limit: int = MAX_POINTS) -> list[Any]:
    """At most ``limit`` items, evenly strided, always keeping the first and the last.

    A long solver trace (FISTAPruner with many rounds) would otherwise grow every redraw until the
    browser freezes; the axes keep the true step numbers, so the shape of the curve is unchanged.
    """
    if len(items) <= limit:
        return list(items)
    stride = math.ceil((len(items) - 1) / (limit - 1))
    picked = list(items[::stride])
    if picked[-1] is not items[-1]:
        picked.append(items[-1])
    return picked


def heatmap_height(num_layers: int) -> int:
    """Pixels for a heat-map of ``num_layers`` rows (the layer-error line beside it uses the same)."""
    return max(HEIGHT, min(900, 100 + 18 * num_layers))


def error_heatmap(
    pruned: Sequence[SublayerPruned], *, num_layers: int = 0, linears: Sequence[str] = (),
    title: str = "relative reconstruction error ‖ΔW·X‖/‖W·X‖", revision: Any = None,
    bounds: tuple[float, float] = ERROR_BOUNDS,
) -> go.Figure:
    """Heat-map of ``rel_error``: rows are decoder layers (0 at the top), columns the linears.

    Colour is log10(rel_error) on a fixed scale, ``bounds`` (default 1e-4…1, stated in the colour
    bar): a filled cell keeps its colour as the run goes, and two runs read the same by eye. Values
    outside the bounds take the end colours; the hover gives the exact value. A data-free run (no statistics:
    every ``rel_error`` nan, ``weight_rel_error`` set) draws ‖ΔW‖/‖W‖ instead, under its own title.
    Cells not pruned yet are empty; ``num_layers`` and ``linears`` (from RunStarted) lay the grid out before the first
    event arrives so it fills in place. The title counts the cells filled.
    """
    if pruned and all(math.isfinite(_float(e.weight_rel_error)) and not math.isfinite(_float(e.rel_error))
                      for e in pruned):
        title = WEIGHT_ERROR_TITLE  # a data-free run: the error of the weights, which needs no inputs
        pruned = [dataclasses.replace(e, rel_error=e.weight_rel_error) for e in pruned]
    matrix, columns = error_matrix(pruned, num_layers, linears)
    rows = len(matrix)
    height = heatmap_height(rows)
    if not rows or not columns:
        return note_figure(title, "waiting for the first pruned linear", height, revision)
    filled = sum(1 for row in matrix for value in row if math.isfinite(value))
    low, high = bounds
    cells = {(e.layer, e.name): _cell_text(e) for e in pruned}
    text = [[cells.get((i, c), "not yet") for c in columns] for i in range(rows)]
    trace = {"type": "heatmap", "z": [log_scale(row, bounds) for row in matrix], "x": short_names(columns),
             "y": list(range(rows)), "text": text, "customdata": [gaps(row) for row in matrix],
             "colorscale": "Viridis", "zmin": math.log10(low), "zmax": math.log10(high),
             "colorbar": _log_colorbar(bounds), "xgap": 1, "ygap": 1,
             "hovertemplate": "layer %{y} · %{x}<br>rel. error %{customdata:.4g}<br>%{text}<extra></extra>"}
    layout = base_layout(title, height, revision, subtitle=f"{filled} of {rows * len(columns)} linears",
                         yaxis={"title": {"text": "decoder layer"}, "autorange": "reversed",
                                "dtick": 1 if rows <= 32 else None},
                         xaxis={"title": {"text": "linear"}},
                         annotations=[] if pruned else [note("waiting for the first pruned linear")])
    return figure([trace], layout)


def log_scale(values: Sequence[Any], bounds: tuple[float, float] = ERROR_BOUNDS) -> list[float | None]:
    """log10(v) clipped to [log10(low), log10(high)] (0 and below → low end); nan/inf → None (empty cell)."""
    low, high = (math.log10(b) for b in bounds)
    out: list[float | None] = []
    for value in gaps(values):
        out.append(None if value is None else low if value <= 0 else min(high, max(low, math.log10(value))))
    return out


def _log_colorbar(bounds: tuple[float, float]) -> Spec:
    """Colour bar ticks at each power of ten within ``bounds``, titled with the scale it states."""
    low, high = (round(math.log10(b)) for b in bounds)
    ticks = list(range(low, high + 1))
    labels = [f"{10.0 ** t:g}" for t in ticks]
    return {"title": {"text": f"rel. error<br>(log, fixed {labels[0]}…{labels[-1]})"}, "tickvals": ticks,
            "ticktext": labels}


def _cell_text(event: SublayerPruned) -> str:
    """Hover text of a heat-map cell: the sparsity (from the keep-mask); when quantized, bits and weight error."""
    bits, quant_error = _float(getattr(event, "bits", math.nan)), _float(getattr(event, "quant_rel_error", math.nan))
    text = f"sparsity {_float(event.sparsity):.3f}" + (f" · {bits:.2f} bits/weight" if math.isfinite(bits) else "")
    return text + (f"<br>quantization error ‖Ŵ − W‖/‖W‖ (kept) {quant_error:.4f}" if math.isfinite(quant_error) else "")


def layer_error_figure(done: Sequence[LayerDone], *, num_layers: int = 0, revision: Any = None,
                       height: int = HEIGHT, why: str = ERROR_NOT_MEASURED) -> go.Figure:
    """Line of each decoder layer's output error ‖f̂(x) − f(x)‖/‖f(x)‖ against the dense layer.

    A run that did not measure it (every LayerDone's error is None) gets a note saying why: ``why``
    (:func:`error_not_measured`: ``--error none``, or a data-free run that computed no inputs).
    """
    title = "layer output error vs dense"
    if not done and not num_layers:
        return note_figure(title, "waiting for the first finished layer", height, revision)
    if done and all(e.output_rel_error is None for e in done):
        return note_figure(title, why, height, revision)
    trace = {"type": "scatter", "mode": "lines+markers", "name": "output error", "x": [e.layer for e in done],
             "y": gaps([e.output_rel_error for e in done]), "customdata": gaps([e.seconds for e in done]),
             "hovertemplate": "layer %{x}<br>output rel. error %{y:.4f}<br>%{customdata:.2f} s<extra></extra>"}
    last = max([num_layers] + [e.layer + 1 for e in done])
    layout = base_layout(title, height, revision,
                         xaxis={"title": {"text": "decoder layer"}, "range": [-0.5, max(last, 1) - 0.5],
                                "dtick": 1 if last <= 32 else None},
                         yaxis={"title": {"text": "relative error"}, "rangemode": "tozero"},
                         annotations=[] if done else [note("waiting for the first finished layer")])
    return figure([trace], layout)


def convergence_figure(steps: Sequence[SolverStep], blocks: Sequence[BlockStep] = (), *,
                       revision: Any = None, height: int = HEIGHT, linear: str = "") -> go.Figure:
    """Objective per iteration of the current linear's solver, one line per outer round.

    Without SolverSteps but with BlockSteps (Thanos), bars of the error each column block added.
    With neither, ``linear`` (``layer 3 · q_proj``) names the linear whose solve is starting.
    """
    if steps:
        return _solver_lines(thin(steps), revision, height)
    if blocks:
        blocks = thin(blocks)
        first = blocks[0]
        trace = {"type": "bar", "name": "error added", "x": [b.block for b in blocks],
                 "y": gaps([b.error for b in blocks]),
                 "customdata": [[b.removed, _float(b.seconds)] for b in blocks],
                 "hovertemplate": "block %{x}<br>error %{y:.4g}<br>removed %{customdata[0]}"
                                  "<br>%{customdata[1]:.3f} s<extra></extra>"}
        layout = base_layout(f"block-wise solve · layer {first.layer} · {first.name}", height, revision,
                             xaxis={"title": {"text": "column block"}}, yaxis={"title": {"text": "error added"}})
        return figure([trace], layout)
    if linear:
        return note_figure(f"solver convergence · {linear}", "the solve of this linear is starting", height, revision)
    return note_figure("solver convergence", "no iterative solver trace yet (FISTAPruner and Thanos draw here)",
                       height, revision)


def _solver_lines(steps: Sequence[SolverStep], revision: Any, height: int) -> go.Figure:
    """One line through every iteration; marker colour = outer round (cheap to redraw: no legend)."""
    first = steps[0]
    rounds = [s.values.get("round") for s in steps]
    lams = [s.values.get("lam") for s in steps]
    trace = {"type": "scatter", "mode": "lines+markers", "name": "objective", "x": [s.step for s in steps],
             "y": gaps([s.objective for s in steps]), "line": {"color": "#b0b7c9", "width": 1},
             "customdata": [[r if r is not None else "–", lam if lam is not None else math.nan]
                            for r, lam in zip(rounds, lams, strict=True)],
             "hovertemplate": "iteration %{x}<br>objective %{y:.5g}<br>round %{customdata[0]} · "
                              "λ %{customdata[1]:.3g}<extra></extra>"}
    if any(r is not None for r in rounds):
        whole = [int(r) if r is not None else 0 for r in rounds]
        trace["marker"] = {"size": 5, "color": whole, **round_scale(min(whole), max(whole))}
    else:
        trace["marker"] = {"size": 5, "color": PALETTE[0]}
    positive = all(s.objective > 0 for s in steps if math.isfinite(s.objective))
    ratio = first.values.get("c_ratio", math.nan)  # AWP: ‖C‖_F/‖C‖₂, how far the paper's step is below 1/L
    notes = [f"‖C‖_F/‖C‖₂ {ratio:.3g}"] if math.isfinite(ratio) else []
    rtn = first.values.get("objective_rtn", math.nan)  # AWP started off RTN (quant_init): RTN's objective
    traces = [trace]
    if math.isfinite(rtn):
        notes.append(f"RTN's objective {rtn:.3g} (dashed)")
        traces.append(_reference_line([steps[0].step, steps[-1].step], rtn, "RTN's objective"))
    layout = base_layout(f"{first.solver} convergence · layer {first.layer} · {first.name}", height, revision,
                         subtitle=" · ".join(notes), xaxis={"title": {"text": "iteration"}},
                         yaxis={"title": {"text": "objective"}, "type": "log" if positive else "linear"},
                         showlegend=False)
    return figure(traces, layout)


def _reference_line(x: list[int], value: float, name: str) -> Spec:
    """A dashed grey horizontal line at ``value`` over the iterations ``x`` (first, last), named on hover."""
    return {"type": "scatter", "mode": "lines", "name": name, "x": x, "y": [value, value],
            "line": {"color": "#888", "width": 1.5, "dash": "dash"},
            "hovertemplate": f"{name} %{{y:.5g}}<extra></extra>"}


def round_scale(first: int, last: int) -> Spec:
    """Marker colour settings for whole rounds ``first..last``: one flat colour band per round.

    Round r fills [r − ½, r + ½] of the colour axis, so the colour bar is discrete and its ticks
    are the round numbers (at most about ten of them labelled).
    """
    count = last - first + 1
    colors = sample_colorscale("Viridis", [i / max(count - 1, 1) for i in range(count)])
    scale = [[edge, color] for i, color in enumerate(colors) for edge in (i / count, (i + 1) / count)]
    step = max(1, math.ceil(count / 10))
    return {"colorscale": scale, "cmin": first - 0.5, "cmax": last + 0.5, "showscale": True,
            "colorbar": {"title": {"text": "round"}, "thickness": 12, "tickvals": list(range(first, last + 1, step))}}


def lambda_figure(steps: Sequence[LambdaStep], *, revision: Any = None, linear: str = "") -> go.Figure:
    """FISTAPruner's λ bisection for one linear: three panels sharing the round axis.

    1. λ per round within [λ_low, λ_high] (log scale; a bound of 0 is not drawn);
    2. E_round / E_total per round against the threshold ξ (above ξ, λ goes up);
    3. the sparsity of the FISTA solution before rounding to the target, on a fixed 0…100% axis.
    Rounds that improved the best error have filled markers, the others open ones; a legend names
    every line. Without steps, ``linear`` (``layer 3 · q_proj``) names the linear whose first round
    is under way.
    """
    height = LAMBDA_HEIGHT
    if not steps and linear:
        return note_figure(f"λ bisection · {linear}", "first λ round of this linear under way", height, revision)
    if not steps:
        return note_figure("λ bisection", "the λ bisection trace appears for FISTAPruner runs", height, revision)
    steps = thin(steps)
    first = steps[0]
    rounds = [s.round for s in steps]
    marker = {"symbol": ["circle" if s.improved else "circle-open" for s in steps], "size": 8}
    low = [v if v is not None and v > 0 else None for v in gaps([s.lam_low for s in steps])]

    def line(y: list, name: str, axis: int, **style: Any) -> Spec:
        return {"type": "scatter", "x": rounds, "y": y, "name": name, "xaxis": "x",
                "yaxis": f"y{axis if axis > 1 else ''}", **style}

    data = [
        line(gaps([s.lam_high for s in steps]), "λ high", 1, mode="lines", line={"dash": "dot", "color": "#999"}),
        line(low, "λ low", 1, mode="lines", line={"dash": "dot", "color": "#bbb"}, fill="tonexty",
             fillcolor="rgba(150,150,150,0.12)"),
        line(gaps([s.lam for s in steps]), "λ", 1, mode="lines+markers", marker=marker,
             line={"color": PALETTE[0]}),
        line(gaps([s.ratio for s in steps]), "E_round/E_total", 2, mode="lines+markers", marker=marker,
             line={"color": PALETTE[1]}, customdata=[[_float(s.e_round), _float(s.e_total)] for s in steps],
             hovertemplate="round %{x}<br>ratio %{y:.3f}<br>E_round %{customdata[0]:.4g}"
                           "<br>E_total %{customdata[1]:.4g}<extra></extra>"),
        line(gaps([s.xi for s in steps]), "ξ", 2, mode="lines", line={"dash": "dash", "color": "#d62728"}),
        line([None if v is None else min(1.0, max(0.0, v)) for v in gaps([s.sparsity_before_rounding for s in steps])],
             "sparsity before rounding", 3, mode="lines+markers", marker=marker, line={"color": PALETTE[2]},
             cliponaxis=False),
    ]
    lams = _finite([s.lam for s in steps] + [s.lam_high for s in steps] + [v for v in low if v])
    domains = stacked(3)
    titles = ("λ and its bounds", "E_round / E_total vs ξ", "sparsity before rounding")
    layout = base_layout(f"λ bisection · layer {first.layer} · {first.name}", height, revision,
                         margin={"l": 60, "r": 20, "t": 64, "b": 40}, showlegend=True,
                         legend={"x": 1.02, "y": 1.0, "xanchor": "left", "yanchor": "top", "font": {"size": 11}},
                         xaxis={"anchor": "y3", "title": {"text": "outer round"},
                                "dtick": 1 if len(steps) <= 30 else None},
                         yaxis={"domain": domains[0], "title": {"text": "λ"},
                                "type": "log" if lams and min(lams) > 0 else "linear"},
                         yaxis2={"domain": domains[1], "title": {"text": "ratio"}, "rangemode": "tozero"},
                         yaxis3={"domain": domains[2], "title": {"text": "zeros"}, "tickformat": ".0%",
                                 "range": [0.0, 1.0]},
                         annotations=[panel_title(t, 0.5, d[1]) for t, d in zip(titles, domains, strict=True)])
    return figure(data, layout)
