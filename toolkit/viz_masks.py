"""Plotly figures of keep-masks (STYLE R8): images, differences, overlap, sparsity histograms.

Pure functions of numpy arrays and plain rows (from :mod:`toolkit.compare`); no I/O, no torch.
Large matrices are shown block-averaged (:func:`downsample`): a pixel is the kept fraction of
its block, so a 576 × 1536 mask becomes a 96 × 256 image; hover says the block size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from toolkit.compare import column_sparsity, row_sparsity, sparsity
from toolkit.viz import PALETTE, base_layout, figure, gaps, note_figure, panel_title, short_names, stacked

MAX_SIDE = 256
KEPT_SCALE = [[0.0, "#ffffff"], [1.0, "#1f2430"]]  # pruned white, kept dark
DIFF_SCALE = [[0.0, "#2166ac"], [0.5, "#ffffff"], [1.0, "#b2182b"]]  # −1 only in B (blue), +1 only in A (red)
METRICS = (("iou", "IoU of kept weights"), ("hamming", "Hamming distance"), ("group_agreement", "n:m group agreement"))


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


def mask_images_figure(masks: Mapping[str, np.ndarray], *, title: str = "keep-masks (dark = kept)",
                       max_side: int = MAX_SIDE) -> go.Figure:
    """Side-by-side keep-mask images with linked zoom; dark = kept, light = pruned."""
    if not masks:
        return note_figure(title, "pick runs, a layer and a linear", 420)
    domains = side_by_side(len(masks))
    data, layout, titles = [], base_layout(title, 440, margin={"l": 60, "r": 20, "t": 90, "b": 40}), []
    for index, (label, mask) in enumerate(masks.items(), 1):
        image, block = downsample(mask, max_side)
        data.append(_image(image, block, index, colorscale=KEPT_SCALE, zmin=0, zmax=1, name=label,
                           showscale=index == len(masks), colorbar={"title": {"text": "kept"}}))
        suffix = str(index) if index > 1 else ""
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


def overlap_figure(rows: Sequence[Mapping[str, Any]], *, title: str = "overlap with the first run") -> go.Figure:
    """Grouped bars of IoU, Hamming distance and n:m group agreement per pair of runs."""
    if not rows:
        return note_figure(title, "pick two or more runs")
    pairs = [str(r["pair"]) for r in rows]
    data = []
    for index, (key, label) in enumerate(METRICS):
        values = gaps([r[key] for r in rows])
        data.append({"type": "bar", "x": pairs, "y": values, "name": label, "marker": {"color": PALETTE[index]},
                     "text": [f"{v:.3f}" if v is not None else "n/a" for v in values], "textposition": "outside"})
    layout = base_layout(title, barmode="group", yaxis={"range": [0, 1.12], "title": {"text": "fraction"}})
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
    """IoU, Hamming and group agreement for every linear of the model (x: layer · linear)."""
    title = "overlap with the first run, every linear"
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
        for panel, (key, _) in enumerate(METRICS, 1):
            data.append({"type": "scatter", "mode": "lines+markers", "marker": {"size": 5}, "name": pair,
                         "legendgroup": pair, "showlegend": panel == 1, "x": ticks,
                         "y": gaps([mine[k][key] if k in mine else None for k in keys]),
                         "line": {"color": PALETTE[index % len(PALETTE)]}, "xaxis": "x",
                         "yaxis": f"y{panel if panel > 1 else ''}"})
    domains = stacked(3, 0.06)
    layout = base_layout(title, 580, margin={"l": 60, "r": 20, "t": 64, "b": 90},
                         xaxis={"anchor": "y3", "tickangle": -60},
                         annotations=[panel_title(label, 0.5, domain[1])
                                      for (_, label), domain in zip(METRICS, domains, strict=True)])
    for panel, domain in enumerate(domains, 1):
        layout[f"yaxis{panel if panel > 1 else ''}"] = {"domain": domain, "range": [-0.02, 1.02]}
    return figure(data, layout)
