"""Plotly figure builders for quantizing runs (CONTRIBUTING.md R8): pure functions, no I/O, no torch.

- :func:`projection_figure`: AWP's per-iteration trace of one linear (SolverStep ``values``): the
  distance the projection moved the gradient step, ‖Z − Θ‖_F/‖W‖_F; the sparsity projected at each
  step (the joint ramp); the bits of the grid (32 = not quantized yet).
- :func:`bits_figure`: perplexity against bits per weight (scales and zero points counted), one
  line per method and sparsity, from sweep points.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from toolkit.events import SolverStep
from toolkit.figures.run import (
    LAMBDA_HEIGHT,
    PALETTE,
    base_layout,
    figure,
    gaps,
    method_color,
    note_figure,
    panel_title,
    stacked,
    thin,
)


def has_projection_trace(steps: Sequence[SolverStep]) -> bool:
    """True when the steps carry a projection distance (AWP's trace)."""
    return any("proj_dist" in step.values for step in steps)


def projection_figure(steps: Sequence[SolverStep], *, revision: Any = None) -> go.Figure:
    """AWP's projection trace for one linear: three panels sharing the iteration axis.

    1. ‖Z^(t) − Θ^(t+1)‖_F / ‖W‖_F, the distance moved by Proj_𝒞 (log scale);
    2. the fraction of zeros of the projected iterate (the joint ramp 0 → p, then held); when only
       quantizing, the fraction of codes that differ from round-to-nearest's instead;
    3. the bits of the grid the iterate lies on (32 before the joint schedule quantizes).
    Steps without a value (step 0, the thinned ones) leave a gap.
    """
    height = LAMBDA_HEIGHT
    steps = thin([s for s in steps if "proj_dist" in s.values])
    if not steps:
        return note_figure("projection trace", "AWP's projection distance, sparsity ramp and bits appear here",
                           height, revision)
    first = steps[0]
    x = [s.step for s in steps]

    def line(key: str, name: str, axis: int, color: str) -> dict[str, Any]:
        return {"type": "scatter", "mode": "lines+markers", "name": name, "x": x,
                "y": gaps([s.values.get(key, math.nan) for s in steps]), "xaxis": "x",
                "yaxis": f"y{axis if axis > 1 else ''}", "marker": {"size": 4, "color": color},
                "line": {"color": color}}

    # quantizing only (no sparsity values): the middle panel shows the codes moved from round-to-nearest
    codes = not any("sparsity" in s.values for s in steps) and any("codes_changed" in s.values for s in steps)
    key, name, unit, middle = (("codes_changed", "codes changed", "codes", "codes changed from round-to-nearest")
                               if codes else ("sparsity", "sparsity", "zeros", "sparsity of the iterate"))
    data = [line("proj_dist", "projection distance", 1, PALETTE[0]), line(key, name, 2, PALETTE[1]),
            line("bits", "bits", 3, PALETTE[2])]
    dists = [v for v in (s.values.get("proj_dist", math.nan) for s in steps) if math.isfinite(v)]
    domains = stacked(3)
    titles = ("‖Z − Θ‖ / ‖W‖ moved by the projection", middle, "grid bits (32 = not quantized)")
    layout = base_layout(f"awp projection · layer {first.layer} · {first.name}", height, revision,
                         margin={"l": 60, "r": 20, "t": 64, "b": 40}, showlegend=False,
                         xaxis={"anchor": "y3", "title": {"text": "iteration"}},
                         yaxis={"domain": domains[0], "title": {"text": "distance"},
                                "type": "log" if dists and min(dists) > 0 else "linear"},
                         yaxis2={"domain": domains[1], "title": {"text": unit}, "tickformat": ".3%" if codes else ".0%",
                                 "rangemode": "tozero"},
                         yaxis3={"domain": domains[2], "title": {"text": "bits"}, "rangemode": "tozero"},
                         annotations=[panel_title(t, 0.5, d[1]) for t, d in zip(titles, domains, strict=True)])
    return figure(data, layout)


def bits_figure(points: Sequence[Mapping[str, Any]], *, dense_ppl: float | None = None,
                revision: Any = None) -> go.Figure:
    """Perplexity (log) against bits per weight, one line per (method, sparsity) through its bit widths.

    ``points`` are sweep-point dicts with ``method``, ``pattern``, ``sparsity`` (the compression
    label, e.g. ``50%+int4:g128``), ``quant`` (the grid label or ""), ``bits_per_weight`` and
    ``ppl``; points without a finite bits-per-weight or perplexity are left out.
    """
    title = "perplexity vs bits per weight"
    usable = [p for p in points
              if math.isfinite(_float(p.get("bits_per_weight"))) and math.isfinite(_float(p.get("ppl")))]
    methods = list(dict.fromkeys(str(p["method"]) for p in usable))
    curves: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for point in usable:
        sparsity = str(point["sparsity"]).split("+")[0] if point.get("pattern") != "none" else ""
        curves.setdefault((str(point["method"]), sparsity), []).append(point)
    data = []
    for (method, sparsity), group in curves.items():
        group = sorted(group, key=lambda p: _float(p["bits_per_weight"]))
        labels = [str(p.get("quant") or "dense") for p in group]
        data.append({"type": "scatter", "mode": "lines+markers+text", "name": f"{method} {sparsity}".strip(),
                     "x": [_float(p["bits_per_weight"]) for p in group], "y": [_float(p["ppl"]) for p in group],
                     "text": labels, "textposition": "top center", "customdata": labels,
                     "line": {"color": method_color(method, methods), "dash": "dot" if sparsity else "solid"},
                     "hovertemplate": f"{method} {sparsity} %{{customdata}}<br>%{{x:.3f}} bits/weight"
                                      "<br>ppl %{y:.3f}<extra></extra>"})
    if not data:
        return note_figure(title, "quantized points appear as the runs finish", 420, revision)
    if dense_ppl is not None and math.isfinite(dense_ppl):
        data.append({"type": "scatter", "mode": "lines", "name": f"dense ({dense_ppl:.2f})", "x": [1.5, 16.0],
                     "y": [dense_ppl, dense_ppl], "line": {"dash": "dash", "color": "#444"}})
    layout = base_layout(title, 420, revision, xaxis={"title": {"text": "bits per weight (scales counted)"}},
                         yaxis={"title": {"text": "perplexity (log)"}, "type": "log"})
    return figure(data, layout)


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
