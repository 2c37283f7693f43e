"""Plotly figures of keep-masks at native resolution (CONTRIBUTING.md R8): a chosen tile, and where two runs differ.

A downsampled image of a 576 × 1536 mask cannot show single weights; these figures show a
``size × size`` tile (:class:`toolkit.compare.diff.Tile`) with one cell per weight, and the
four-way difference of two masks (:func:`toolkit.compare.diff.categories`) in categorical colours,
with a legend that counts each category over the whole linear. Pure functions, no I/O, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go

from toolkit.compare.diff import CATEGORIES, Tile, categories, category_counts
from toolkit.figures.masks import side_by_side
from toolkit.figures.run import base_layout, figure, note_figure, panel_title

# Okabe–Ito colours (safe for colour-blind readers); index = category code
CATEGORY_COLORS = ("#f2f2f2", "#0072B2", "#E69F00", "#1f2430")
TILE_SCALE = [[0.0, "#ffffff"], [0.5, "#ffffff"], [0.5, "#1f2430"], [1.0, "#1f2430"]]  # 0 pruned white, 1 kept dark


def _discrete_scale(colors: tuple[str, ...]) -> list[list[object]]:
    """A colour scale with one flat band per code 0..n−1 (use with zmin −0.5, zmax n − 0.5)."""
    bands: list[list[object]] = []
    for code, color in enumerate(colors):
        bands += [[code / len(colors), color], [(code + 1) / len(colors), color]]
    return bands


def _axes(tile: Tile, suffix: str = "", **extra: object) -> dict[str, dict[str, object]]:
    x = {"title": {"text": "input column"}, "range": [tile.col - 0.5, tile.col + tile.cols - 0.5]}
    y = {"title": {"text": "output row"}, "range": [tile.row + tile.rows - 0.5, tile.row - 0.5]}
    return {f"xaxis{suffix}": {**x, **extra}, f"yaxis{suffix}": {**y, "anchor": f"x{suffix}"}}


def tile_images_figure(masks: Mapping[str, np.ndarray], tile: Tile) -> go.Figure:
    """The ``tile`` of every run's keep-mask side by side, one cell per weight (dark = kept, white = pruned)."""
    title = f"tile at native resolution: {tile.label} (one cell = one weight)"
    if not masks:
        return note_figure(title, "pick runs, a layer and a linear", 420)
    domains = side_by_side(len(masks))
    data, layout, titles = [], base_layout(title, 460, margin={"l": 60, "r": 20, "t": 90, "b": 40}), []
    for index, (label, mask) in enumerate(masks.items(), 1):
        suffix = str(index) if index > 1 else ""
        cells = tile.cut(np.asarray(mask, dtype=bool))  # (rows, cols), no resampling
        data.append({"type": "heatmap", "z": cells.astype(np.uint8), "x": tile.col + np.arange(tile.cols),
                     "y": tile.row + np.arange(tile.rows), "xaxis": f"x{suffix}", "yaxis": f"y{suffix}",
                     "colorscale": TILE_SCALE, "zmin": 0, "zmax": 1, "showscale": False, "name": label,
                     "hovertemplate": "row %{y}, column %{x}: %{z}<br>(1 = kept, 0 = pruned)<extra></extra>"})
        axes = _axes(tile, suffix, domain=domains[index - 1], **({"matches": "x"} if index > 1 else {}))
        layout.update(axes)
        kept = float(cells.mean()) if cells.size else 0.0
        titles.append(panel_title(f"{label}<br>{kept:.1%} of the tile kept", sum(domains[index - 1]) / 2, 1.0))
    layout["annotations"] = titles
    return figure(data, layout)


def category_legend(counts: list[int], labels: tuple[str, str]) -> list[str]:
    """Legend entries ``kept by wanda only · 1,234 (12.3%)`` in :data:`CATEGORIES` order (A, B = ``labels``)."""
    total = max(1, sum(counts))
    names = [name.replace(" A ", f" {labels[0]} ").replace(" B ", f" {labels[1]} ") for name in CATEGORIES]
    return [f"{name} · {count:,} ({count / total:.1%})" for name, count in zip(names, counts, strict=True)]


def category_difference_figure(a: np.ndarray, b: np.ndarray, labels: tuple[str, str], tile: Tile) -> go.Figure:
    """The four-way difference of ``a`` and ``b`` on ``tile``, in categorical colours, one cell per weight.

    Legend counts (and %) are over the whole linear; the title gives the tile's own share of
    weights that only one run keeps.
    """
    codes = categories(a, b)
    legend = category_legend(category_counts(codes), labels)
    cells = tile.cut(codes)
    differ = float(np.isin(cells, (1, 2)).mean()) if cells.size else 0.0
    names = np.array([name.split(" · ")[0] for name in legend], dtype=object)
    data = [{"type": "heatmap", "z": cells, "x": tile.col + np.arange(tile.cols), "y": tile.row + np.arange(tile.rows),
             "customdata": names[cells], "colorscale": _discrete_scale(CATEGORY_COLORS), "zmin": -0.5,
             "zmax": len(CATEGORIES) - 0.5, "showscale": False, "showlegend": False,
             "hovertemplate": "row %{y}, column %{x}: %{customdata}<extra></extra>"}]
    for color, name in zip(CATEGORY_COLORS, legend, strict=True):  # legend swatches (heat-maps have no legend)
        data.append({"type": "scatter", "x": [None], "y": [None], "mode": "markers", "name": name,
                     "marker": {"symbol": "square", "size": 14, "color": color, "line": {"color": "#888", "width": 1}}})
    title = f"{labels[0]} (A) vs {labels[1]} (B)<br>{tile.label} · {differ:.1%} of this tile kept by one run only"
    layout = {**base_layout(title, 520, margin={"l": 60, "r": 20, "t": 80, "b": 40},
                            legend={"orientation": "h", "x": 0.0, "y": -0.14, "yanchor": "top",
                                    "title": {"text": "whole linear:"}}), **_axes(tile)}
    return figure(data, layout)
