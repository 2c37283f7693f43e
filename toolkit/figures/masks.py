"""Plotly figures of keep-masks (CONTRIBUTING.md R8): images, differences, overlap, sparsity histograms.

Pure functions of numpy arrays and plain rows (from :mod:`toolkit.compare.masks`); no I/O, no torch.
Large matrices are shown block-averaged (:func:`downsample`): a pixel is the kept fraction of
its block, so a 576 × 1536 mask becomes a 96 × 256 image; hover says the block size. The colour
scale is fixed (0 to 1 kept, a perceptual scale rather than grey), so a block that keeps more than
the matrix average stands out: Wanda's column stripes and SparseGPT's row bands stay visible.
Native-resolution tiles and the four-way difference are in :mod:`toolkit.figures.mask_tiles`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from toolkit.compare.diff import Tile
from toolkit.compare.masks import chance_iou, column_sparsity, row_sparsity, sparsity
from toolkit.figures.run import PALETTE, base_layout, figure, gaps, note_figure, panel_title, short_names

MAX_SIDE = 256
# kept fraction per block on a fixed 0..1 scale (viridis stops): 0 violet, 0.5 teal, 1 yellow, never grey
KEPT_SCALE = [[0.0, "#440154"], [0.25, "#3b528b"], [0.5, "#21918c"], [0.75, "#5ec962"], [1.0, "#fde725"]]
DIFF_SCALE = [[0.0, "#2166ac"], [0.5, "#ffffff"], [1.0, "#b2182b"]]  # −1 only in B (blue), +1 only in A (red)
CHANCE_LEGEND = "chance: two random masks of these kept fractions p, q, IoU = pq/(p+q−pq)"
CHANCE_COLOR = "#b0b0b0"


def downsample(mask: np.ndarray, max_side: int = MAX_SIDE) -> tuple[np.ndarray, tuple[int, int]]:
    """Block-average ``mask`` (out, in) so neither side exceeds ``max_side``.

    Returns the image (float32; for a bool mask each pixel is the kept fraction of its block;
    edge blocks average only their real cells) and the block size (rows, columns) per pixel.

    >>> image, block = downsample(np.ones((600, 100), dtype=bool), 256)
    >>> image.shape, block
    ((200, 100), (3, 1))
    """
    values = np.asarray(mask, dtype=np.float32)
    rows, cols = values.shape
    fr, fc = max(1, math.ceil(rows / max_side)), max(1, math.ceil(cols / max_side))
    if fr == 1 and fc == 1:
        return values, (1, 1)
    out_r, out_c = math.ceil(rows / fr), math.ceil(cols / fc)
    padded = np.zeros((out_r * fr, out_c * fc), dtype=np.float32)
    counts = np.zeros_like(padded)
    padded[:rows, :cols] = values
    counts[:rows, :cols] = 1.0
    sums = padded.reshape(out_r, fr, out_c, fc).sum(axis=(1, 3))  # (out_r, out_c)
    cells = counts.reshape(out_r, fr, out_c, fc).sum(axis=(1, 3))
    return sums / cells, (fr, fc)


def _image(values: np.ndarray, block: tuple[int, int], axis: int = 1, **style: Any) -> dict[str, Any]:
    rows, cols = values.shape
    suffix = str(axis) if axis > 1 else ""
    return {"type": "heatmap", "z": np.round(values, 3), "x": np.arange(cols) * block[1],
            "y": np.arange(rows) * block[0], "xaxis": f"x{suffix}", "yaxis": f"y{suffix}",
            "hovertemplate": f"row %{{y}}, col %{{x}} (block {block[0]}×{block[1]})<br>%{{z:.2f}}<extra></extra>",
            **style}


def side_by_side(count: int, gap: float = 0.04) -> list[list[float]]:
    """Horizontal domains of ``count`` panels, left first."""
    width = (1.0 - gap * (count - 1)) / count
    return [[max(0.0, round(i * (width + gap), 6)), min(1.0, round(i * (width + gap) + width, 6))]
            for i in range(count)]


def mask_images_figure(masks: Mapping[str, np.ndarray], *,
                       title: str = "kept fraction per block (fixed scale 0–1; outline = the zoomed tile)",
                       max_side: int = MAX_SIDE, tile: Tile | None = None) -> go.Figure:
    """Side-by-side block-averaged keep-mask images with linked zoom, and ``tile`` outlined on each."""
    if not masks:
        return note_figure(title, "pick runs, a layer and a linear", 420)
    domains = side_by_side(len(masks))
    data, layout, titles = [], base_layout(title, 440, margin={"l": 60, "r": 20, "t": 90, "b": 40}), []
    for index, (label, mask) in enumerate(masks.items(), 1):
        image, block = downsample(mask, max_side)
        data.append(_image(image, block, index, colorscale=KEPT_SCALE, zmin=0, zmax=1, name=label,
                           showscale=index == len(masks), colorbar={"title": {"text": "kept<br>fraction"}}))
        suffix = str(index) if index > 1 else ""
        if tile is not None:  # cell centres sit at multiples of the block size: outline the tile's weights
            layout.setdefault("shapes", []).append(
                {"type": "rect", "xref": f"x{suffix}", "yref": f"y{suffix}", "x0": tile.col - block[1] / 2,
                 "x1": tile.col + tile.cols - block[1] / 2, "y0": tile.row - block[0] / 2,
                 "y1": tile.row + tile.rows - block[0] / 2, "line": {"color": "#ff2d55", "width": 2}})
        layout[f"xaxis{suffix}"] = {"domain": domains[index - 1], "anchor": f"y{suffix}", "title": {"text": "input"},
                                    **({"matches": "x"} if index > 1 else {})}
        layout[f"yaxis{suffix}"] = {"anchor": f"x{suffix}", "autorange": "reversed",
                                    **({"matches": "y"} if index > 1 else {"title": {"text": "output"}})}
        rows, cols = np.shape(mask)
        titles.append(panel_title(f"{label}<br>{rows}×{cols}, sparsity {sparsity(mask):.1%}",
                                  sum(domains[index - 1]) / 2, 1.0))
    layout["annotations"] = titles
    return figure(data, layout)


def mask_difference_figure(a: np.ndarray, b: np.ndarray, labels: tuple[str, str] = ("A", "B"), *,
                           max_side: int = MAX_SIDE) -> go.Figure:
    """Image of ``a − b``: red = kept only in A, blue = kept only in B, white = the same choice."""
    diff = np.asarray(a, dtype=np.int8) - np.asarray(b, dtype=np.int8)
    image, block = downsample(diff, max_side)
    only_a, only_b = int(np.count_nonzero(diff > 0)), int(np.count_nonzero(diff < 0))
    title = f"difference: {only_a} kept only in {labels[0]} (red), {only_b} only in {labels[1]} (blue)"
    trace = _image(image, block, colorscale=DIFF_SCALE, zmin=-1, zmax=1, colorbar={"title": {"text": "A − B"}})
    layout = base_layout(title, 420, yaxis={"autorange": "reversed", "title": {"text": "output"}},
                         xaxis={"title": {"text": "input"}})
    return figure([trace], layout)


def _chance(row: Mapping[str, Any]) -> float:
    """The row's chance IoU, from its two sparsities when the row does not carry it."""
    if "chance_iou" in row:
        return float(row["chance_iou"])
    return chance_iou(1 - float(row["sparsity_a"]), 1 - float(row["sparsity_b"]))


def overlap_figure(rows: Sequence[Mapping[str, Any]], *, title: str = "IoU of kept weights with the first run",
                   unit: str = "weights") -> go.Figure:
    """Bars per pair of runs: the IoU of the kept ``unit`` and, beside it, its chance baseline.

    The baseline is the IoU two independent random masks with the same kept fractions p, q
    would have, pq / (p + q − pq) (:func:`toolkit.compare.masks.chance_iou`); IoU above it means the
    two runs choose the same weights more often than chance.
    """
    if not rows:
        return note_figure(title, "pick two or more runs")
    pairs = [str(r["pair"]) for r in rows]
    measured, chance = [float(r["iou"]) for r in rows], [_chance(r) for r in rows]
    data = [{"type": "bar", "x": pairs, "y": measured, "name": f"IoU of kept {unit}", "marker": {"color": PALETTE[0]},
             "text": [f"{v:.3f}" for v in measured], "textposition": "outside"},
            {"type": "bar", "x": pairs, "y": chance, "name": CHANCE_LEGEND, "marker": {"color": CHANCE_COLOR},
             "text": [f"{v:.3f}" for v in chance], "textposition": "outside"}]
    layout = base_layout(title, barmode="group", yaxis={"range": [0, 1.12], "title": {"text": "IoU"}},
                         legend={"orientation": "h", "y": -0.25})
    return figure(data, layout)


def sparsity_histograms(masks: Mapping[str, np.ndarray], *, bins: int = 30) -> go.Figure:
    """Histograms of per-row and per-column sparsity, one colour per run (overlaid)."""
    domains = side_by_side(2, 0.08)
    data = []
    for index, (label, mask) in enumerate(masks.items()):
        color = PALETTE[index % len(PALETTE)]
        for axis, values in ((1, row_sparsity(mask)), (2, column_sparsity(mask))):
            suffix = str(axis) if axis > 1 else ""
            data.append({"type": "histogram", "x": np.round(values, 4), "nbinsx": bins, "name": label,
                         "legendgroup": label, "showlegend": axis == 1, "marker": {"color": color}, "opacity": 0.6,
                         "xaxis": f"x{suffix}", "yaxis": f"y{suffix}"})
    axis = {"title": {"text": "fraction pruned"}, "range": [-0.02, 1.02]}
    layout = base_layout("sparsity per row and per column", barmode="overlay",
                         margin={"l": 60, "r": 20, "t": 64, "b": 44},
                         xaxis={**axis, "domain": domains[0]}, yaxis={"title": {"text": "count"}},
                         xaxis2={**axis, "domain": domains[1], "anchor": "y2"}, yaxis2={"anchor": "x2"},
                         annotations=[panel_title("per output row", sum(domains[0]) / 2, 1.0),
                                      panel_title("per input column", sum(domains[1]) / 2, 1.0)])
    return figure(data, layout)


def all_linears_overlap_figure(rows: Sequence[Mapping[str, Any]]) -> go.Figure:
    """IoU of kept weights for every linear of the model (x: layer · linear), each pair with its chance line.

    Solid: the measured IoU against the first run; dotted, same colour: the IoU two random masks
    with those kept fractions would have, pq / (p + q − pq).
    """
    title = "IoU of kept weights with the first run, every linear (dotted: chance)"
    if not rows:
        return note_figure(title, "pick two or more runs")
    keys = list(dict.fromkeys((int(r["layer"]), str(r["name"])) for r in rows))
    distinct = sorted({name for _, name in keys})
    names = dict(zip(distinct, short_names(distinct), strict=True))
    ticks = [f"L{layer} {names[name]}" for layer, name in keys]
    pairs = list(dict.fromkeys(str(r["pair"]) for r in rows))
    data = []
    for index, pair in enumerate(pairs):
        mine = {(int(r["layer"]), str(r["name"])): r for r in rows if str(r["pair"]) == pair}
        color = PALETTE[index % len(PALETTE)]
        data.append({"type": "scatter", "mode": "lines+markers", "marker": {"size": 5}, "name": f"IoU {pair}",
                     "x": ticks, "y": gaps([mine[k]["iou"] if k in mine else None for k in keys]),
                     "line": {"color": color}})
        data.append({"type": "scatter", "mode": "lines", "name": f"{CHANCE_LEGEND} ({pair})", "x": ticks,
                     "y": gaps([_chance(mine[k]) if k in mine else None for k in keys]),
                     "line": {"color": color, "dash": "dot"}})
    layout = base_layout(title, 460, margin={"l": 60, "r": 20, "t": 64, "b": 90},
                         xaxis={"tickangle": -60}, yaxis={"range": [-0.02, 1.02], "title": {"text": "IoU"}},
                         legend={"orientation": "h", "y": -0.45})
    return figure(data, layout)
