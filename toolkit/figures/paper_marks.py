"""Colours, reference lines and notes of a plotly figure, as matplotlib draws them (for :mod:`toolkit.figures.paper`).

A redrawn figure keeps what the interactive one shows:

- a trace without a colour gets plotly's: entry ``i mod n`` of the layout's colorway (or its
  template's, else plotly's default qualitative palette) for the i-th trace of the figure;
- plotly colours (``#rrggbb``, CSS names, ``rgb(r, g, b)``, ``rgba(r, g, b, a)``) become matplotlib
  colours; per-point colour lists stay per point;
- line widths in plotly pixels become points (× :data:`WIDTH_PT_PER_PX`, so plotly's default 2 px
  is the paper style's 1.2 pt);
- line shapes (``add_hline``/``add_vline`` and layout ``shapes``, whatever their x/y reference:
  data, ``paper`` or ``x domain``) and rectangles, on the panel whose axis they name, in their own
  colour and dash;
- annotations placed in data, ``paper`` or ``domain`` coordinates (the label of an ``add_hline``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PLOTLY_COLORWAY = ("#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880",
                   "#FF97FF", "#FECB52")  # plotly's qualitative.Plotly: the default template's colorway
WIDTH_PT_PER_PX = 0.6  # plotly's 2 px default line → 1.2 pt, the paper style's line width
DASHES = {"solid": "-", "dash": "--", "dot": ":", "dashdot": "-.", "longdash": (0, (8, 3)),
          "longdashdot": (0, (8, 3, 1, 3))}
_RGB = re.compile(r"rgba?\(\s*([\d.]+)\s*,\s*([\d.]+)\s*,\s*([\d.]+)\s*(?:,\s*([\d.]+)\s*)?\)")


def plain_text(text: Any) -> str:
    """Plotly label text as plain text: ``<br>`` becomes a new line, other tags are dropped."""
    return re.sub(r"<[^>]+>", "", re.sub(r"<br\s*/?>", "\n", str(text or ""))).strip()


def mpl_color(value: Any) -> Any:
    """A plotly colour string as a matplotlib colour (``rgb()``/``rgba()`` → an RGBA tuple); None stays None."""
    if not isinstance(value, str):
        return None
    match = _RGB.fullmatch(value.strip())
    if match:
        r, g, b, a = match.groups()
        return (float(r) / 255, float(g) / 255, float(b) / 255, float(a) if a is not None else 1.0)
    return value


def colorway(layout: Mapping[str, Any]) -> list[str]:
    """The colours plotly gives traces without one: the layout's colorway, its template's, or plotly's default."""
    template = (layout.get("template") or {}).get("layout") or {}
    return list(layout.get("colorway") or template.get("colorway") or PLOTLY_COLORWAY)


def line_width(spec: Mapping[str, Any], default: float | None = None) -> float | None:
    """Matplotlib line width (points) of a plotly ``line`` dict (``width`` in pixels); ``default`` when unset."""
    width = spec.get("width")
    return float(width) * WIDTH_PT_PER_PX if isinstance(width, int | float) else default


def linestyle(dash: Any) -> Any:
    """Matplotlib line style of a plotly ``dash`` name (unknown names are dashed)."""
    return DASHES.get(str(dash or "solid"), "--")


def _axis_of(ref: Any, letter: str) -> str | None:
    """The axis id (``x``, ``y2``) a shape/annotation reference names, or None for ``paper``."""
    text = str(ref or letter).split(" ")[0]
    return None if text == "paper" else ("y" if text == "y1" else "x" if text == "x1" else text)


def _panel_for(axes: Mapping[tuple[str, str], Any], xref: Any, yref: Any) -> Any:
    """The panel a shape or annotation belongs to: the one drawing on its named y (or x) axis, else the first."""
    x_id, y_id = _axis_of(xref, "x"), _axis_of(yref, "y")
    for (x_axis, y_axis), ax in axes.items():
        if (y_id is None or y_axis == y_id) and (x_id is None or x_axis == x_id):
            return ax
    for (x_axis, y_axis), ax in axes.items():
        if y_axis == y_id or x_axis == x_id:
            return ax
    return next(iter(axes.values()))


def _transform(ax: Any, xref: Any, yref: Any) -> Any:
    """Data coordinates where the reference names an axis, axes fractions where it is ``paper``/``domain``."""
    from matplotlib.transforms import blended_transform_factory

    x_fraction = _axis_of(xref, "x") is None or "domain" in str(xref)
    y_fraction = _axis_of(yref, "y") is None or "domain" in str(yref)
    return blended_transform_factory(ax.transAxes if x_fraction else ax.transData,
                                     ax.transAxes if y_fraction else ax.transData)


def draw_shapes(axes: Mapping[tuple[str, str], Any], shapes: Iterable[Mapping[str, Any]]) -> None:
    """Line and rectangle shapes (reference lines, outlines) on the panel they refer to, in their colour and dash."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    for shape in shapes:
        kind = shape.get("type", "line")
        if kind not in ("line", "rect") or shape.get("visible") is False:
            continue
        xref, yref = shape.get("xref", "x"), shape.get("yref", "y")
        ax = _panel_for(axes, xref, yref)
        spec = shape.get("line") or {}
        style = {"color": mpl_color(spec.get("color")) or "#444", "linewidth": line_width(spec, 1.2),
                 "linestyle": linestyle(spec.get("dash")), "transform": _transform(ax, xref, yref)}
        x0, x1, y0, y1 = (float(shape.get(key, 0)) for key in ("x0", "x1", "y0", "y1"))
        if kind == "line":
            ax.add_line(Line2D([x0, x1], [y0, y1], **style))
            if "domain" not in str(yref) and _axis_of(yref, "y") is not None:
                ax.update_datalim([(ax.get_xlim()[0], y0), (ax.get_xlim()[0], y1)])  # the line stays in view
                ax.autoscale_view()
        else:
            ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, **style))


def draw_annotations(fig: Any, axes: Mapping[tuple[str, str], Any], annotations: Iterable[Mapping[str, Any]],
                     figure_box: Sequence[float]) -> None:
    """Annotation texts on their panel, in data or domain coordinates.

    With both references ``paper`` a note goes in figure fractions of the plotting area
    ``figure_box`` (left, bottom, right, top).
    """
    left, bottom, right, top = figure_box
    for note in annotations:
        if not note.get("text") or note.get("visible") is False:
            continue
        text, xref, yref = plain_text(note["text"]), note.get("xref", "x"), note.get("yref", "y")
        align = {"left": "left", "right": "right"}.get(str(note.get("xanchor")), "center")
        valign = {"bottom": "bottom", "top": "top"}.get(str(note.get("yanchor")), "center")
        style = {"ha": align, "va": valign, "fontsize": 7, "color": "#555"}
        if xref == "paper" and yref == "paper":
            x = left + float(note.get("x", 0.5)) * (right - left)
            y = bottom + float(note.get("y", 0.5)) * (top - bottom)
            fig.text(x, y, text, **style)
            continue
        x, y = note.get("x", 0.5), note.get("y", 0.5)
        if not all(isinstance(v, int | float) for v in (x, y)):
            continue  # placed on a category: plotly's position has no fixed number to redraw it at
        ax = _panel_for(axes, xref, yref)
        ax.text(float(x), float(y), text, transform=_transform(ax, xref, yref), **style)


def log_minor_formatter(target: Any) -> Any:
    """Labels of a log axis's minor ticks: every one within a decade, 2 and 5 up to three decades, none beyond.

    ``target`` is the matplotlib axis (``ax.xaxis``/``ax.yaxis``); its view decides at draw time,
    so labels never pile up (0.06, 0.07, 0.08, 0.09 over each other) on a wide axis.
    """
    from matplotlib.ticker import FuncFormatter

    def label(value: float, _: Any) -> str:
        low, high = sorted(float(v) for v in target.get_view_interval())
        if value <= 0 or low <= 0:
            return ""
        decades = math.log10(high / low)
        mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
        if decades <= 1 or (decades <= 3 and any(abs(mantissa - m) < 1e-6 for m in (2, 5))):
            return f"{value:g}"
        return ""

    return FuncFormatter(label)
