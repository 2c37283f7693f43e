"""One plotly trace drawn on a matplotlib Axes (the trace half of :mod:`toolkit.figures.paper`).

``scatter`` → ``Axes.plot`` (lines/markers, dash, width, opacity and symbol kept, "-open" hollow; per-point marker
colours as ``Axes.scatter``) and text labels; ``bar`` → grouped ``Axes.bar`` (offset
``(i − (n−1)/2)·w`` for the i-th of n bar traces, w = 0.8/n; per-bar colours and opacity kept);
``histogram`` → ``Axes.hist``; a trace without a colour gets the one plotly gives it (``color``,
from :func:`toolkit.figures.paper_marks.colorway`); ``heatmap`` → ``Axes.imshow`` of z on its x/y grid with the
trace's colour scale, bounds (zmin/zmax) and colour bar. Other trace types raise.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from toolkit.errors import ToolkitError
from toolkit.figures.paper_marks import line_width, mpl_color, plain_text

DASHES = {"solid": "-", "dash": "--", "dot": ":", "dashdot": "-."}
SYMBOLS = {"circle": "o", "square": "s", "diamond": "D", "star": "*", "cross": "P", "x": "X",
           "triangle-up": "^", "triangle-down": "v"}
MAX_CELL_LABELS = 400  # heat-map cell texts are drawn only for grids this small


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
        stops = [(float(pos), mpl_color(str(color))) for pos, color in scale]  # rgb() strings become RGBA tuples
        return LinearSegmentedColormap.from_list("plotly", stops)
    return colormaps["viridis"]  # no scale given: the one the product's heat-maps use


def _colors(value: Any, default: Any) -> Any:
    """A plotly colour (one string, or one per point) as matplotlib colour(s); ``default`` when there is none."""
    if isinstance(value, str):
        return mpl_color(value)
    if isinstance(value, Sequence | np.ndarray) and len(value) and all(isinstance(v, str) for v in value):
        return [mpl_color(v) for v in value]
    return default


def _scaled(marker: Mapping[str, Any]) -> list[Any]:
    """Per-point colours of numeric ``marker.color`` on ``marker.colorscale``, cmin..cmax (else the data range)."""
    values = finite_or_nan(marker["color"])
    low = float(marker.get("cmin", np.nanmin(values) if np.isfinite(values).any() else 0.0))
    high = float(marker.get("cmax", np.nanmax(values) if np.isfinite(values).any() else 1.0))
    cmap = colormap(marker.get("colorscale"))
    return [cmap((v - low) / (high - low) if high > low else 0.5) for v in values]


def draw_trace(fig: Any, ax: Any, trace: Mapping[str, Any], *, bars: Sequence[Mapping[str, Any]],
               barmode: str = "group", color: Any = None) -> None:
    """Draw ``trace`` (a plotly trace dict) on ``ax``; ``bars`` are all bar traces of the figure (for grouping).

    ``color`` is the colour plotly gives the trace when it names none (its place in the colorway).
    """
    kind = trace.get("type", "scatter")
    if kind == "scatter":
        _scatter(ax, trace, color)
    elif kind == "bar":
        _bar(ax, trace, bars, barmode, color)
    elif kind == "histogram":
        values = finite_or_nan(trace.get("x", []))
        ax.hist(values[np.isfinite(values)], bins=int(trace.get("nbinsx") or 30), label=_label(trace),
                color=_colors((trace.get("marker") or {}).get("color"), color), alpha=float(trace.get("opacity", 1.0)))
    elif kind == "heatmap":
        _heatmap(fig, ax, trace)
    else:
        raise ToolkitError(f"plotly trace type {kind!r} cannot be exported yet; export scatter, bar, histogram "
                           "or heatmap figures")


def _scatter(ax: Any, trace: Mapping[str, Any], default: Any) -> None:
    mode = str(trace.get("mode", "lines+markers"))
    xs, x_labels = _positions(list(trace.get("x", [])))
    ys = finite_or_nan(trace.get("y", []))
    if len(xs) == 0 and len(ys):
        xs = np.arange(len(ys), dtype=np.float64)
    line, marker = trace.get("line") or {}, trace.get("marker") or {}
    points = _colors(marker.get("color"), None)
    if points is None and marker.get("colorscale") is not None and isinstance(marker.get("color"), Sequence):
        points = _scaled(marker)  # numbers on a colour scale (rounds of a solver): one colour per point
    color = mpl_color(line.get("color")) or (points if not isinstance(points, list) else None) or default
    style = DASHES.get(str(line.get("dash", "solid")), "--") if "lines" in mode else "none"
    shape = str(marker.get("symbol", "circle"))
    symbol = SYMBOLS.get(shape.removesuffix("-open"), "o") if "markers" in mode else None
    size = marker.get("size")
    size = float(size) * 0.6 if isinstance(size, int | float) else None  # plotly px → points, as line widths
    alpha = float(trace.get("opacity", 1.0))
    per_point = points if isinstance(points, list) and symbol is not None else None
    own = points if points is not None and not isinstance(points, list) else color  # markers keep their colour
    ax.plot(xs, ys, linestyle=style, marker=None if per_point else symbol, color=color, label=_label(trace),
            linewidth=line_width(line), markersize=size, alpha=alpha,
            markerfacecolor="none" if shape.endswith("-open") else own, markeredgecolor=own)
    if per_point is not None:
        ax.scatter(xs, ys, c=per_point[: len(xs)], marker=symbol, s=(size or 3.5) ** 2, alpha=alpha, zorder=3)
    if "text" in mode:
        for x, y, text in zip(xs, ys, trace.get("text") or [], strict=False):
            ax.annotate(plain_text(text), (x, y), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=6)
    if x_labels is not None:
        ax.set_xticks(xs, x_labels)


def _bar(ax: Any, trace: Mapping[str, Any], bars: Sequence[Mapping[str, Any]], barmode: str, default: Any) -> None:
    xs, x_labels = _positions(list(trace.get("x", [])))
    ys = finite_or_nan(trace.get("y", []))
    grouped = barmode == "group" and len(bars) > 1
    index = next((i for i, bar in enumerate(bars) if bar is trace), 0)
    width = 0.8 / len(bars) if grouped else 0.8
    offset = (index - (len(bars) - 1) / 2) * width if grouped else 0.0
    marker = trace.get("marker") or {}
    opacity = marker.get("opacity", trace.get("opacity", 1.0))
    drawn = ax.bar(xs + offset, np.nan_to_num(ys), width=width, label=_label(trace),
                   color=_colors(marker.get("color"), default),
                   alpha=float(opacity) if isinstance(opacity, int | float) else None)
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

