"""Plotly figures of a structured (block-scope) run (CONTRIBUTING.md R8): pure functions of plain data, no torch.

- :func:`newton_figure`: Numerical Pruning's objective f(z) (Eq. 3) per Newton step, one line per
  layer and output projection (``StructureView.newton``).
- :func:`ranking_figure`: the global ranking (Eq. 8) of every head unit and channel, ascending, heads
  and channels coloured, with the removal threshold η (``GlobalRanking``).
- :func:`kept_map_figure`: layer × unit maps of what was kept, heads and channels side by side
  (``StructureView.kept``); :func:`kept_compare_figure` puts the maps of several runs side by side.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from toolkit.events import GlobalRanking
from toolkit.figures.masks import KEPT_SCALE, downsample, side_by_side
from toolkit.figures.run import HEIGHT, PALETTE, base_layout, figure, gaps, note_figure, panel_title
from toolkit.live.structure import KEPT_KINDS, kept_counts

PROJECTIONS = {"o": ("o_proj (attention)", PALETTE[0]), "down": ("down_proj (MLP)", PALETTE[1])}
KIND_COLORS = {"heads": PALETTE[0], "channels": PALETTE[1]}
MAX_COLUMNS = 128  # a layer's channels are drawn in ≤ this many bins (pixel = kept fraction of its bin)
NOT_STRUCTURED = "structured runs draw here (numerical, flap, wanda-sp, magnitude-sp with structured:N%)"


def newton_figure(newton: Mapping[tuple[int, str], Sequence[tuple[int, float]]], *, revision: Any = None,
                  height: int = HEIGHT) -> go.Figure:
    """f(z_t) against Newton step t for every (layer, projection); step 0 is z₀ = (1 − ρ)1.

    The closed form is the one exact Newton step of the quadratic, so its lines have two points;
    ``score_solver=newton`` draws all its iterations (flat after the first).
    """
    title = "Newton iterations per layer: objective f(z) of Eq. 3"
    if not newton:
        return note_figure(title, "no Newton trace yet: " + NOT_STRUCTURED.replace("flap, wanda-sp, magnitude-sp",
                                                                                  "numerical only"),
                           height, revision)
    data, shown = [], set()
    for (layer, name), steps in sorted(newton.items()):
        label, color = PROJECTIONS.get(name, (name, PALETTE[2]))
        values = [v if v > 0 else math.nan for _, v in steps]  # a log axis: f ≥ 0, and 0 would be −∞
        data.append({"type": "scatter", "mode": "lines+markers", "x": [t for t, _ in steps], "y": gaps(values),
                     "name": label, "legendgroup": name, "showlegend": name not in shown,
                     "line": {"color": color, "width": 1}, "marker": {"size": 4, "color": color},
                     "hovertemplate": f"layer {layer} · {label}<br>step %{{x}}<br>f %{{y:.5g}}<extra></extra>"})
        shown.add(name)
    layers = len({layer for layer, _ in newton})
    layout = base_layout(f"{title} · {layers} layer{'s' if layers != 1 else ''}", height, revision,
                         xaxis={"title": {"text": "Newton step"}, "dtick": 1 if _max_step(newton) <= 10 else None},
                         yaxis={"title": {"text": "f(z)"}, "type": "log"},
                         legend={"orientation": "h", "y": -0.25})
    return figure(data, layout)


def _max_step(newton: Mapping[tuple[int, str], Sequence[tuple[int, float]]]) -> int:
    return max((t for steps in newton.values() for t, _ in steps), default=0)


def ranking_figure(ranking: GlobalRanking | None, *, revision: Any = None, height: int = HEIGHT) -> go.Figure:
    """Sorted ranking scores of all candidates (x = position), heads and channels coloured, threshold η dashed.

    Units at or below η were removed (save the ``min_heads``/``min_channels`` best of each layer).
    """
    title = "global ranking of heads and channels"
    if ranking is None:
        return note_figure(title, "no ranking yet: " + NOT_STRUCTURED, height, revision)
    data = []
    if ranking.head_ranks or ranking.channel_ranks:
        kinds = (("channels", ranking.channel_ranks, ranking.channel_values, "channels (evenly spaced sample)", 5),
                 ("heads", ranking.head_ranks, ranking.head_values, "head units", 9))  # the few heads drawn on top
        for kind, ranks, values, label, size in kinds:
            if ranks:
                data.append(_ranking_trace(label, ranks, values, KIND_COLORS[kind], size))
    else:  # a run recorded before the kinds were: the subsample without colours
        candidates = ranking.heads_total + ranking.channels_total
        spread = np.linspace(0, max(candidates - 1, 0), len(ranking.scores)).round().tolist()
        data.append(_ranking_trace("all units (sample)", spread, ranking.scores, "#888", 5))
    layout = base_layout(_ranking_title(ranking), height, revision, legend={"orientation": "h", "y": -0.25},
                         margin={"l": 60, "r": 20, "t": 64, "b": 44},
                         xaxis={"title": {"text": "position in the ascending ranking"}},
                         yaxis={"title": {"text": f"ranking score ({ranking.allocation})"}})
    if math.isfinite(ranking.threshold):
        layout["shapes"] = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": ranking.threshold,
                             "y1": ranking.threshold, "line": {"color": "#2a3f5f", "dash": "dash", "width": 1}}]
        layout["annotations"] = [{"text": f"threshold η = {ranking.threshold:.4g}", "xref": "paper", "x": 0.01,
                                  "y": ranking.threshold, "yanchor": "bottom", "xanchor": "left",
                                  "showarrow": False, "font": {"size": 11}}]
    return figure(data, layout)


def _ranking_trace(label: str, ranks: Sequence[float], values: Sequence[float], color: str,
                   size: int) -> dict[str, Any]:
    return {"type": "scatter", "mode": "markers", "name": label, "x": list(ranks), "y": gaps(values),
            "marker": {"size": size, "color": color, "line": {"color": "white", "width": 0.5}},
            "hovertemplate": f"{label}<br>position %{{x}}<br>score %{{y:.4g}}<extra></extra>"}


def _ranking_title(ranking: GlobalRanking) -> str:
    parts = [f"removed {ranking.heads_removed} of {ranking.heads_total} heads"] if ranking.heads_total else []
    if ranking.channels_total:
        parts.append(f"{ranking.channels_removed} of {ranking.channels_total} channels")
    return (f"global ranking of heads and channels<br>{', '.join(parts)} · {ranking.achieved_ratio:.1%} "
            f"of their parameters (asked {ranking.ratio:.0%})")


def kept_map_figure(kept: Mapping[str, Mapping[int, str]], *, title: str = "kept units per layer (dark = kept)",
                    revision: Any = None, height: int | None = None) -> go.Figure:
    """Layer × unit maps: query heads on top, MLP channels below (binned to ≤ 128 columns)."""
    return kept_compare_figure({"": kept}, title=title, revision=revision, height=height)


def kept_compare_figure(runs: Mapping[str, Mapping[str, Mapping[int, str]]], *,
                        title: str = "kept units per layer (dark = kept)", revision: Any = None,
                        height: int | None = None) -> go.Figure:
    """The kept maps of several runs (label → ``StructureView.kept``) side by side: a column per run, a row per kind."""
    kinds = [kind for kind in KEPT_KINDS if any(kept.get(kind) for kept in runs.values())]
    if not kinds:
        return note_figure(title, "no kept units yet: " + NOT_STRUCTURED, height or HEIGHT, revision)
    layers = max(len(kept.get(kind, {})) for kept in runs.values() for kind in kinds)
    height = height or max(HEIGHT + 40, len(kinds) * (70 + 8 * layers) + 80)
    columns, rows = side_by_side(len(runs), 0.06), _rows(len(kinds))
    data: list[dict[str, Any]] = []
    layout = base_layout(title, height, revision, margin={"l": 60, "r": 20, "t": 70, "b": 40})
    notes = []
    for c, (label, kept) in enumerate(runs.items()):
        for r, kind in enumerate(kinds):
            axis = r * len(runs) + c + 1
            suffix = str(axis) if axis > 1 else ""
            trace, caption = _kept_image(kept.get(kind, {}), kind, suffix)
            data.append(trace)
            layout[f"xaxis{suffix}"] = {"domain": columns[c], "anchor": f"y{suffix}"}
            layout[f"yaxis{suffix}"] = {"domain": rows[r], "anchor": f"x{suffix}", "autorange": "reversed",
                                        "dtick": max(1, layers // 8), "title": {"text": "layer"} if c == 0 else None}
            head = f"{label}<br>" if label and r == 0 else ""
            notes.append(panel_title(f"{head}{kind} (by index): {caption}", sum(columns[c]) / 2, rows[r][1]))
    layout["annotations"] = notes
    return figure(data, layout)


def _rows(count: int) -> list[list[float]]:
    """Vertical domains of ``count`` rows, top first, with room for the panel titles."""
    gap = 0.16 if count > 1 else 0.0
    size = (1.0 - gap * (count - 1)) / count
    return [[round(1.0 - (i + 1) * size - i * gap, 6), round(1.0 - i * size - i * gap, 6)] for i in range(count)]


def _kept_image(kept: Mapping[int, str], kind: str, suffix: str) -> tuple[dict[str, Any], str]:
    """A heatmap trace of one kind's kept map (layers × units) and its caption (kept / total)."""
    counts = kept_counts(dict(kept))
    if not counts:
        return {"type": "heatmap", "z": [], "xaxis": f"x{suffix}", "yaxis": f"y{suffix}"}, "not a candidate"
    width = max(total for _, _, total in counts)
    grid = np.full((len(counts), width), np.nan, dtype=np.float32)
    for row, (layer, _, _) in enumerate(counts):
        bits = np.frombuffer(kept[layer].encode(), dtype=np.uint8) == ord("1")
        grid[row, : len(bits)] = bits
    image, block = downsample(np.nan_to_num(grid, nan=0.0), max_side=max(MAX_COLUMNS, len(counts)))
    kept_total, total = sum(k for _, k, _ in counts), sum(t for _, _, t in counts)
    hover = [[f"layer {layer}: {k} of {t} {kind} kept" for _ in range(image.shape[1])] for layer, k, t in counts]
    what = f"bins of {block[1]}, " if block[1] > 1 else ""
    trace = {"type": "heatmap", "z": np.round(image, 3), "x": (np.arange(image.shape[1]) * block[1]).tolist(),
             "y": [layer for layer, _, _ in counts], "xaxis": f"x{suffix}", "yaxis": f"y{suffix}",
             "colorscale": KEPT_SCALE, "zmin": 0, "zmax": 1, "showscale": False, "text": hover,
             "hovertemplate": f"%{{text}}<br>{kind[:-1]} %{{x}}: kept fraction %{{z:.2f}}<extra></extra>"}
    return trace, f"{what}{kept_total} of {total} kept"
