"""Layer-wise allocation and DSnoT refinement figures (CONTRIBUTING.md R8): pure builders, no I/O, no torch.

- :func:`allocation_figure`: each decoder layer's sparsity s_l as a bar, the run's target S as a
  dashed reference line, and OWL's outlier ratio LOD_l on a second axis (docs/allocation.md). A
  uniform run is a flat row of bars at S.
- :func:`allocation_view_figure`: the same for an :class:`~toolkit.live.allocation.AllocationView`
  (a live run or a stored one), with a note while there is nothing to draw.
- :func:`refine_figure`: DSnoT's effect per layer: the mean relative error ‖ΔW X*‖/‖W X*‖ of the
  refined linears with the method's mask and after the swaps, and DSnoT's own objective ‖e‖/‖Wμ‖.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from toolkit.events import MaskRefined
from toolkit.figures.run import HEIGHT, PALETTE, Spec, base_layout, figure, gaps, note_figure
from toolkit.live.allocation import AllocationView

TITLE = "per-layer sparsity"
REFINE_TITLE = "DSnoT mask refinement"
NOT_SPREAD = "the layer-wise allocation spreads unstructured sparsity (uniform, OWL or a ratio file)"
EVERY_TICK = 16  # up to this many layers every layer is labelled; more: plotly picks the ticks
NO_REFINE = "runs with DSnoT refinement (--refine dsnot) draw each layer's error before and after here"


def allocation_figure(ratios: Sequence[float], *, target: float, outlier_ratios: Sequence[float] = (),
                      label: str = "uniform", layer_weights: Sequence[int] = (), revision: Any = None) -> go.Figure:
    """Bars of each layer's sparsity ``ratios`` (fractions), S = ``target`` dashed, LOD_l on the right axis.

    ``outlier_ratios`` (OWL's LOD_l, fractions; empty for uniform and file allocations) draws a line
    on a second y axis; ``layer_weights`` (weights per layer) goes into the hover and weights the
    total of the title (the plain mean without it). ``label`` names the allocation.
    """
    layers = list(range(len(ratios)))
    total = _total(ratios, layer_weights)
    title = f"{TITLE} · {label} · total {total:.1%}" if label != "uniform" else f"{TITLE} · uniform {target:.1%}"
    bars: Spec = {"type": "bar", "name": "layer sparsity s_l", "x": layers, "y": gaps(ratios),
                  "marker": {"color": PALETTE[0]}, "customdata": _hover(ratios, target, outlier_ratios, layer_weights),
                  "hovertemplate": "layer %{x}<br>sparsity %{y:.2%}%{customdata}<extra></extra>"}
    data = [bars]
    top = max([target, *(r for r in ratios if math.isfinite(r))], default=target)
    layout = base_layout(title, HEIGHT, revision, bargap=0.15, legend={"orientation": "h", "y": -0.25},
                         xaxis={"title": {"text": "decoder layer"}, "range": [-0.5, max(len(layers), 1) - 0.5],
                                "dtick": 1 if len(layers) <= EVERY_TICK else None},
                         yaxis={"title": {"text": "sparsity of the layer"}, "tickformat": ".0%",
                                "range": [0, min(1.0, top + 0.1)]},
                         shapes=[{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": target, "y1": target,
                                  "line": {"color": "#2a3f5f", "dash": "dash", "width": 1.5}}],
                         annotations=[{"text": f"target {target:.0%}", "xref": "paper", "x": 0.99, "y": target,
                                       "xanchor": "right", "yanchor": "bottom", "showarrow": False,
                                       "font": {"size": 11}}])
    if outlier_ratios:
        data.append({"type": "scatter", "mode": "lines+markers", "name": "outlier ratio LOD_l (right axis)",
                     "x": layers, "y": gaps(outlier_ratios), "yaxis": "y2", "line": {"color": PALETTE[1]},
                     "hovertemplate": "layer %{x}<br>LOD %{y:.3%}<extra></extra>"})
        layout["yaxis2"] = {"title": {"text": "outlier ratio LOD_l"}, "overlaying": "y", "side": "right",
                            "tickformat": ".1%", "rangemode": "tozero", "showgrid": False}
        layout["margin"] = {"l": 60, "r": 60, "t": 44, "b": 44}
    return figure(data, layout)


def _total(ratios: Sequence[float], weights: Sequence[int]) -> float:
    """Σ n_l s_l / Σ n_l (the plain mean when the weights are missing or do not match)."""
    if len(weights) != len(ratios) or not sum(weights):
        weights = [1] * len(ratios)
    return sum(r * n for r, n in zip(ratios, weights, strict=True)) / sum(weights) if ratios else math.nan


def _hover(ratios: Sequence[float], target: float, lods: Sequence[float], weights: Sequence[int]) -> list[str]:
    """Per layer: the gap to the target, LOD_l and the weight count when known."""
    rows = []
    for layer, ratio in enumerate(ratios):
        text = f"<br>{100 * (ratio - target):+.1f} points vs the target" if math.isfinite(ratio) else ""
        if layer < len(lods):
            text += f"<br>outlier ratio LOD {lods[layer]:.3%}"
        if layer < len(weights):
            text += f"<br>{weights[layer]:,} weights"
        rows.append(text)
    return rows


def allocation_view_figure(view: AllocationView, *, revision: Any = None, height: int = HEIGHT) -> go.Figure:
    """:func:`allocation_figure` of ``view``; a note before the run starts, before the plan, or where none applies."""
    if not view.compression and not view.planned:
        return note_figure(TITLE, "each layer's sparsity appears here when a run starts", height, revision)
    if not view.applies:
        return note_figure(TITLE, f"{NOT_SPREAD}; this run is {view.compression or 'quantize-only'}", height,
                           revision)
    if not view.planned:
        return note_figure(TITLE, "planned before layer 0 is pruned (OWL scores the dense model first)", height,
                           revision)
    label = view.label if view.kind == "unstructured" else f"{view.compression} in every layer"
    if label.lower().endswith(".json"):  # a ratio file: its name, not its folder
        label = "file " + label.replace("\\", "/").rsplit("/", 1)[-1]
    return allocation_figure(view.layer_ratios(), target=view.target, outlier_ratios=view.outlier_ratios,
                             label=label, layer_weights=view.layer_weights, revision=revision)


def refine_figure(refined: Sequence[MaskRefined], *, revision: Any = None, height: int = HEIGHT) -> go.Figure:
    """Per layer, the mean error of its refined linears with the method's mask (before) and DSnoT's (after).

    Solid: the measured ‖ΔW X*‖/‖W X*‖; dotted: DSnoT's objective ‖e‖/‖Wμ‖ (the expected error it
    shrinks). The hover lists each linear with its swaps; the title sums the swaps.
    """
    if not refined:
        return note_figure(REFINE_TITLE, NO_REFINE, height, revision)
    layers = sorted({int(e.layer) for e in refined})
    by_layer = {layer: [e for e in refined if e.layer == layer] for layer in layers}
    detail = ["<br>".join(f"{e.name.rsplit('.', 1)[-1]}: {e.rel_error_before:.4f} → {e.rel_error_after:.4f} "
                          f"({e.swaps} swaps)" for e in by_layer[layer]) for layer in layers]
    lines = (("rel_error_before", "error, method's mask", "solid", PALETTE[1]),
             ("rel_error_after", "error, refined", "solid", PALETTE[2]),
             ("expected_error_before", "DSnoT objective before", "dot", PALETTE[1]),
             ("expected_error_after", "DSnoT objective after", "dot", PALETTE[2]))
    data = [{"type": "scatter", "mode": "lines+markers", "name": name, "x": layers,
             "y": gaps([_mean([getattr(e, key) for e in by_layer[layer]]) for layer in layers]),
             "line": {"color": color, "dash": dash}, "customdata": detail,
             "hovertemplate": f"layer %{{x}} · {name} %{{y:.4f}}<br>%{{customdata}}<extra></extra>"}
            for key, name, dash, color in lines]
    before, after = _mean([e.rel_error_before for e in refined]), _mean([e.rel_error_after for e in refined])
    title = (f"{REFINE_TITLE}<br>{sum(int(e.swaps) for e in refined):,} swaps in {len(refined)} linears · "
             f"mean error {before:.4f} → {after:.4f}")
    layout = base_layout(title, height, revision, legend={"orientation": "h", "y": -0.3},
                         margin={"l": 60, "r": 20, "t": 64, "b": 60},
                         xaxis={"title": {"text": "decoder layer"}, "dtick": 1 if len(layers) <= EVERY_TICK else None},
                         yaxis={"title": {"text": "relative error (layer mean)"}, "rangemode": "tozero"})
    return figure(data, layout)


def _mean(values: Sequence[float]) -> float:
    finite = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan
