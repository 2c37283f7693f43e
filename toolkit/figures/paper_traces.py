"""One plotly trace drawn on a matplotlib Axes (the trace half of :mod:`toolkit.figures.paper`).

``scatter`` → ``Axes.plot`` (lines/markers, dash and symbol kept) and text labels; ``bar`` →
grouped ``Axes.bar`` (offset ``(i − (n−1)/2)·w`` for the i-th of n bar traces, w = 0.8/n);
``histogram`` → ``Axes.hist``; ``heatmap`` → ``Axes.imshow`` of z on its x/y grid with the
trace's colour scale, bounds (zmin/zmax) and colour bar. Other trace types raise.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from toolkit.errors import ToolkitError

DASHES = {"solid": "-", "dash": "--", "dot": ":", "dashdot": "-."}
SYMBOLS = {"circle": "o", "square": "s", "diamond": "D", "star": "*", "cross": "P", "x": "X",
           "triangle-up": "^", "triangle-down": "v"}
MAX_CELL_LABELS = 400  # heat-map cell texts are drawn only for grids this small


def plain_text(text: Any) -> str:
    """Plotly label text as plain text: ``<br>`` becomes a new line, other tags are dropped."""
    return re.sub(r"<[^>]+>", "", re.sub(r"<br\s*/?>", "\n", str(text or ""))).strip()


def decode_arrays(value: Any) -> Any:
    """``value`` with plotly's typed arrays (``{"dtype", "bdata", "shape"}`` from ``to_dict``) as numpy arrays."""
    if isinstance(value, Mapping):
        if "bdata" in value and "dtype" in value:
            array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(str(value["dtype"])))
            shape = value.get("shape")
            return array.reshape([int(n) for n in str(shape).split(",")]) if shape else array
        return {key: decode_arrays(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [decode_arrays(item) for item in value]
    return value


def finite_or_nan(values: Iterable[Any]) -> np.ndarray:
    """Values as float64, with None (plotly's gap) and non-numbers as nan."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "biuf":
        return values.astype(np.float64)
    out = []
    for value in values:
        try:
            out.append(math.nan if value is None else float(value))
        except (TypeError, ValueError):
            out.append(math.nan)
    return np.asarray(out, dtype=np.float64)


def _label(trace: Mapping[str, Any]) -> str | None:
    name = trace.get("name")
    return plain_text(name) if name and trace.get("showlegend") is not False else None


def _positions(values: Sequence[Any]) -> tuple[np.ndarray, list[str] | None]:
    """Numeric positions of x (or y) values; categorical strings become 0..n−1 with their labels."""
    if len(values) and all(isinstance(v, str) for v in values):
        return np.arange(len(values), dtype=np.float64), [str(v) for v in values]
    return finite_or_nan(values), None


def colormap(scale: Any) -> Any:
    """A matplotlib colormap for a plotly colour scale (a name such as "Viridis", or [[pos, colour], …])."""
    from matplotlib import colormaps
    from matplotlib.colors import LinearSegmentedColormap

    if isinstance(scale, str):
        name = scale.lower()
        if name in colormaps:
            return colormaps[name]
        raise ToolkitError(f"colour scale {scale!r} has no matplotlib equivalent; pass it as [[position, colour], …]")
    if isinstance(scale, Sequence) and scale:
        return LinearSegmentedColormap.from_list("plotly", [(float(pos), str(color)) for pos, color in scale])
    return colormaps["viridis"]  # no scale given: the one the product's heat-maps use


def draw_trace(fig: Any, ax: Any, trace: Mapping[str, Any], *, bars: Sequence[Mapping[str, Any]],
               barmode: str = "group") -> None:
    """Draw ``trace`` (a plotly trace dict) on ``ax``; ``bars`` are all bar traces of the figure (for grouping)."""
    kind = trace.get("type", "scatter")
    if kind == "scatter":
        _scatter(ax, trace)
    elif kind == "bar":
        _bar(ax, trace, bars, barmode)
    elif kind == "histogram":
        values = finite_or_nan(trace.get("x", []))
        ax.hist(values[np.isfinite(values)], bins=int(trace.get("nbinsx") or 30), label=_label(trace),
                color=(trace.get("marker") or {}).get("color"), alpha=float(trace.get("opacity", 1.0)))
    elif kind == "heatmap":
        _heatmap(fig, ax, trace)
    else:
        raise ToolkitError(f"plotly trace type {kind!r} cannot be exported yet; export scatter, bar, histogram "
                           "or heatmap figures")


def _scatter(ax: Any, trace: Mapping[str, Any]) -> None:
    mode = str(trace.get("mode", "lines+markers"))
    xs, x_labels = _positions(list(trace.get("x", [])))
    ys = finite_or_nan(trace.get("y", []))
    if len(xs) == 0 and len(ys):
        xs = np.arange(len(ys), dtype=np.float64)
    line, marker = trace.get("line") or {}, trace.get("marker") or {}
    color = line.get("color") or (marker.get("color") if isinstance(marker.get("color"), str) else None)
    style = DASHES.get(str(line.get("dash", "solid")), "--") if "lines" in mode else "none"
    symbol = SYMBOLS.get(str(marker.get("symbol", "circle")), "o") if "markers" in mode else None
    ax.plot(xs, ys, linestyle=style, marker=symbol, color=color, label=_label(trace))
    if "text" in mode:
        for x, y, text in zip(xs, ys, trace.get("text") or [], strict=False):
            ax.annotate(plain_text(text), (x, y), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=6)
    if x_labels is not None:
        ax.set_xticks(xs, x_labels)


def _bar(ax: Any, trace: Mapping[str, Any], bars: Sequence[Mapping[str, Any]], barmode: str) -> None:
    xs, x_labels = _positions(list(trace.get("x", [])))
    ys = finite_or_nan(trace.get("y", []))
    grouped = barmode == "group" and len(bars) > 1
    index = next((i for i, bar in enumerate(bars) if bar is trace), 0)
    width = 0.8 / len(bars) if grouped else 0.8
    offset = (index - (len(bars) - 1) / 2) * width if grouped else 0.0
    color = (trace.get("marker") or {}).get("color")
    drawn = ax.bar(xs + offset, np.nan_to_num(ys), width=width, label=_label(trace),
                   color=color if isinstance(color, str) else None)
    texts = trace.get("text")
    if texts:
        ax.bar_label(drawn, labels=[plain_text(t) for t in texts], fontsize=6, padding=1)
    if x_labels is not None:
        ax.set_xticks(np.arange(len(x_labels)), x_labels)


def _heatmap(fig: Any, ax: Any, trace: Mapping[str, Any]) -> None:
    raw = trace.get("z", [])
    z = finite_or_nan(raw) if isinstance(raw, np.ndarray) else np.asarray([finite_or_nan(r) for r in raw])
    # z: (rows, cols), row i at y[i]
    if z.ndim != 2 or z.size == 0:
        return
    rows, cols = z.shape
    xs, x_labels = _positions(list(trace.get("x", range(cols))))
    ys, y_labels = _positions(list(trace.get("y", range(rows))))
    step_x = float(xs[1] - xs[0]) if len(xs) > 1 else 1.0
    step_y = float(ys[1] - ys[0]) if len(ys) > 1 else 1.0
    extent = (xs[0] - step_x / 2, xs[-1] + step_x / 2, ys[0] - step_y / 2, ys[-1] + step_y / 2)
    image = ax.imshow(np.ma.masked_invalid(z), cmap=colormap(trace.get("colorscale")), aspect="auto",
                      origin="lower", extent=extent, vmin=trace.get("zmin"), vmax=trace.get("zmax"),
                      interpolation="nearest")
    ax.grid(False)
    if x_labels is not None:
        ax.set_xticks(xs, x_labels, rotation=30 if max(map(len, x_labels)) > 6 else 0)
    if y_labels is not None:
        ax.set_yticks(ys, y_labels)
    texts = trace.get("text") if trace.get("texttemplate") else None
    if texts is not None and rows * cols <= MAX_CELL_LABELS:
        for i, row in enumerate(texts):
            for j, text in enumerate(row):
                ax.text(xs[j], ys[i], plain_text(text), ha="center", va="center", fontsize=6, color="white")
    if trace.get("showscale") is not False:
        _colorbar(fig, ax, image, trace.get("colorbar") or {})


def _colorbar(fig: Any, ax: Any, image: Any, spec: Mapping[str, Any]) -> None:
    bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    if spec.get("tickvals") is not None:
        bar.set_ticks(list(spec["tickvals"]), labels=[plain_text(t) for t in spec.get("ticktext", spec["tickvals"])])
    title = spec.get("title")
    if title:
        bar.set_label(plain_text(title.get("text", "") if isinstance(title, Mapping) else title))

