"""The compression frontier (CONTRIBUTING.md R8): perplexity against decode speed, each output's size as its marker.

One :class:`FrontierPoint` per output model: its perplexity, its decode tokens/s at batch 1 relative
to the dense source measured beside it (the ratio, robust to the machine's load where the absolute
rates are not), and its bytes. :func:`pareto_front` says which outputs no other beats on both
perplexity and a second figure (speed, or size); :func:`frontier_figure` draws them: perplexity on
a log axis against the speed ratio, marker area proportional to the bytes (a hollow marker when the
size is an estimate, e.g. a model the format cannot save), each point labelled, the front as a
step line.

The same figure is drawn for the frontier benchmark's records (:func:`benchmark_point`, read by
``benchmarks/results_frontier.py`` for docs/results.md and by ``notebooks/08_frontier.ipynb``) and
for the runs of a run store (:mod:`toolkit.figures.frontier_runs`, the app's Sweep tab and the
notebook). Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from toolkit.figures.run import PALETTE, Spec, base_layout, figure, note_figure

TITLE = "perplexity vs decode speed (marker area ∝ bytes)"
X_TITLE = "decode tokens/s relative to dense (batch 1) · marker area ∝ bytes, hollow: size estimated"
FRONT_NAME = "Pareto front"
FRONT_COLOR = "#444"
DENSE_COLOR = "#999"  # the dotted vertical line at the dense model's speed
MAX_MARKER = 44  # px: the diameter of the largest output's marker
UNKNOWN_MARKER = 10  # px: an output whose bytes are not known at all
HEIGHT = 480


@dataclass(frozen=True)
class FrontierPoint:
    """One output model on the frontier.

    ``speed``: decode tokens/s at batch 1 over the dense source's, measured in one process (None: not
    measured, the point is listed, not drawn). ``bytes``: its size; ``estimated``: that size is an
    accounting estimate rather than the files as saved. ``group`` picks the colour (a family:
    dense, width, depth, quant, …); ``note`` goes to the hover (runs, commits, why a figure is missing).
    """

    label: str
    ppl: float
    speed: float | None = None
    bytes: int | None = None
    estimated: bool = False
    group: str = ""
    note: str = ""


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _number(value: Any) -> float | None:
    return float(value) if _finite(value) else None


def pareto_front(points: Sequence[FrontierPoint], value: Callable[[FrontierPoint], float | None]) -> list[bool | None]:
    """Per point: on the front of low perplexity and high ``value(point)``; None where either is missing.

    A point is on the front when no other point has both a lower-or-equal perplexity and a
    higher-or-equal value with one of the two strictly better. Two identical points are both on it.
    Points whose perplexity or value is missing (None, nan) take no part: they neither are on the
    front nor push another point off it. For a figure where less is better (bytes), pass its negative.
    """
    pairs = [(p.ppl, float(v)) if _finite(p.ppl) and (v := _number(value(p))) is not None else None for p in points]
    return [None if pair is None else not any(other is not None and other[0] <= pair[0] and other[1] >= pair[1]
                                              and other != pair for other in pairs)
            for pair in pairs]


def speed_of(point: FrontierPoint) -> float | None:
    """The speed ratio of a point (the value of the speed front)."""
    return point.speed


def smaller(point: FrontierPoint) -> float | None:
    """Minus the bytes of a point whose size was measured as saved (the value of the size front)."""
    return None if point.bytes is None or point.estimated else -float(point.bytes)


def front_steps(points: Sequence[FrontierPoint]) -> tuple[list[float], list[float]]:
    """The step line through the front's points: from the slowest (best perplexity) to the fastest.

    Between two front points the best perplexity reachable at a speed of at least x is the next
    faster point's: the line rises at each front point's speed, then runs flat to the next one.
    """
    ordered = sorted(points, key=lambda p: (float(p.speed or 0.0), p.ppl))
    xs: list[float] = []
    ys: list[float] = []
    for index, point in enumerate(ordered):
        if index:
            xs.append(xs[-1])
            ys.append(point.ppl)
        xs.append(float(point.speed or 0.0))
        ys.append(point.ppl)
    return xs, ys


def size_text(point: FrontierPoint) -> str:
    """``123.4 MiB`` as saved, ``est. 123.4 MiB`` from the accounting, or ``size unknown``."""
    if point.bytes is None:
        return "size unknown"
    return f"{'est. ' if point.estimated else ''}{point.bytes / 2**20:.1f} MiB"


def _marker_size(point: FrontierPoint, biggest: float) -> float:
    if point.bytes is None or biggest <= 0:
        return UNKNOWN_MARKER
    return max(4.0, MAX_MARKER * math.sqrt(point.bytes / biggest))  # area ∝ bytes


def _legend_trace(group: str, color: str) -> Spec:
    """A legend entry of one colour (an empty trace with a small marker: the points' own are as big as their bytes)."""
    return {"type": "scatter", "mode": "markers", "name": group or "output", "legendgroup": group or "output",
            "x": [None], "y": [None], "marker": {"symbol": "circle", "size": 10, "color": color}, "hoverinfo": "skip"}


def _point_trace(point: FrontierPoint, *, color: str, size: float, on_front: bool) -> Spec:
    hollow = point.estimated or point.bytes is None
    hover = (f"<b>{point.label}</b><br>perplexity {point.ppl:.2f} · decode {point.speed:.2f}× dense<br>"
             f"{size_text(point)}{' · on the Pareto front' if on_front else ''}"
             + (f"<br>{point.note}" if point.note else ""))
    return {"type": "scatter", "mode": "markers+text", "name": point.group or "output",
            "legendgroup": point.group or "output", "showlegend": False, "x": [point.speed], "y": [point.ppl],
            "text": [point.label], "textposition": "top center", "textfont": {"size": 10},
            "marker": {"symbol": "circle-open" if hollow else "circle", "size": size, "color": color,
                       "opacity": 0.75, "line": {"color": color, "width": 2}},
            "hovertext": [hover], "hoverinfo": "text"}


def _missing_note(points: Sequence[FrontierPoint]) -> Spec | None:
    missing = [p.label for p in points if not (_finite(p.ppl) and _finite(p.speed))]
    if not missing:
        return None
    return {"text": "no measured speed, not drawn: " + ", ".join(missing), "x": 0.0, "y": -0.2, "xref": "paper",
            "yref": "paper", "xanchor": "left", "yanchor": "top", "showarrow": False,
            "font": {"color": "#888", "size": 11}}


def frontier_figure(points: Sequence[FrontierPoint], *, title: str = TITLE, revision: Any = None,
                    height: int = HEIGHT) -> go.Figure:
    """Perplexity (log) against decode speed relative to dense, marker area ∝ bytes, the front as a step line.

    A dotted vertical line marks the dense model's speed (1×): points left of it decode slower than dense.

    Points without a perplexity or a measured speed are named in a note under the plot, not drawn.
    """
    drawn = [p for p in points if _finite(p.ppl) and _finite(p.speed)]
    if not drawn:
        return note_figure(title, "no output with both a perplexity and a measured speed yet", height, revision)
    front = pareto_front(drawn, speed_of)
    biggest = max((float(p.bytes) for p in drawn if p.bytes is not None), default=0.0)
    groups = list(dict.fromkeys(p.group for p in drawn))
    steps = front_steps([p for p, on in zip(drawn, front, strict=True) if on])
    data: list[Spec] = [{"type": "scatter", "mode": "lines", "name": FRONT_NAME, "x": steps[0], "y": steps[1],
                         "line": {"color": FRONT_COLOR, "dash": "dash", "width": 1.5}, "hoverinfo": "skip"}]
    ppls = [p.ppl for p in drawn]
    data.append({"type": "scatter", "mode": "lines", "name": "dense speed (1×)", "x": [1.0, 1.0],
                 "y": [min(ppls), max(ppls)], "line": {"color": DENSE_COLOR, "dash": "dot", "width": 1},
                 "hoverinfo": "skip"})
    colors = {group: PALETTE[index % len(PALETTE)] for index, group in enumerate(groups)}
    data += [_point_trace(point, color=colors[point.group], size=_marker_size(point, biggest), on_front=bool(on))
             for point, on in zip(drawn, front, strict=True)]
    data += [_legend_trace(group, colors[group]) for group in groups]
    missing = _missing_note(points)
    margin = {"l": 60, "r": 20, "t": 54, "b": 90 if missing else 50}
    layout = base_layout(title, height, revision, xaxis={"title": {"text": X_TITLE}},
                         yaxis={"title": {"text": "wiki perplexity (log)"}, "type": "log"},
                         annotations=[missing] if missing else [], margin=margin)
    return figure(data, layout)


def decode_ratio(record: Mapping[str, Any], batch: int = 1) -> float | None:
    """A frontier benchmark record's decode tokens/s at ``batch`` over the dense source's (None: not measured)."""
    speed = record.get("speed") or {}
    model = _number((speed.get("decode_tokens_per_s") or {}).get(str(batch)))
    dense = _number((speed.get("dense_decode_tokens_per_s") or {}).get(str(batch)))
    return model / dense if model is not None and dense else None


def benchmark_point(record: Mapping[str, Any]) -> FrontierPoint:
    """The point of one record of the frontier benchmark (``benchmarks/results/cpu_frontier.jsonl``)."""
    on_disk, estimate = record.get("bytes_on_disk"), record.get("bytes_estimated")
    chain = record.get("chain") or []
    runs = ", ".join(f"{step.get('run')} ({step.get('git')})" for step in chain)
    why = record.get("not_saved_reason")
    note = "<br>".join(part for part in (runs, f"not saved: {why}" if why else "") if part)
    ppl = _number(record.get("ppl"))
    return FrontierPoint(label=str(record.get("entry", "?")), ppl=math.nan if ppl is None else ppl,
                         speed=decode_ratio(record), bytes=on_disk if on_disk is not None else estimate,
                         estimated=on_disk is None and estimate is not None, group=str(record.get("family", "")),
                         note=note)


def newest_by_entry(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The frontier records, the last one of each ``entry`` (the file is appended in time order), first-seen order."""
    found: dict[str, Mapping[str, Any]] = {}
    for record in records:
        if record.get("benchmark") == "frontier":
            found[str(record.get("entry"))] = record
    return list(found.values())
