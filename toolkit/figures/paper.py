"""Publication figures: any of the product's plotly figures redrawn with matplotlib in a paper style.

The builders in :mod:`toolkit.figures.run`, :mod:`toolkit.figures.masks`, :mod:`toolkit.figures.sweep` (sweep
curves, error heat-maps, keep-mask images and differences, overlap bars, histograms) return plotly
figures; :func:`to_matplotlib` reads the same data (traces and layout) back and draws it with
matplotlib, so a PNG/PDF/SVG holds exactly what the interactive view shows. Supported traces:
``scatter`` (lines, markers, text), ``bar`` (grouped), ``histogram`` and ``heatmap``; panels are
placed by the plotly axis domains, an axis ``overlaying`` another shares its panel (a right-hand
axis); colours, reference lines and notes follow :mod:`toolkit.figures.paper_marks`. Files are
cropped to what was drawn (``bbox_inches="tight"``), so colour-bar titles and labels stay whole.

:func:`save_figure` writes the files; :func:`png_bytes` gives the static image the notebooks
carry beside the interactive figure (:mod:`toolkit.figures.static`).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from toolkit.errors import ToolkitError
from toolkit.figures.paper_marks import colorway, draw_annotations, draw_shapes, log_minor_formatter
from toolkit.figures.paper_traces import decode_arrays, draw_trace, plain_text

FORMATS = ("png", "pdf", "svg")
WIDTH_IN = 6.75  # a two-column paper's text width, inches
DPI = 300  # PNG resolution for print
PAPER_STYLE: dict[Any, Any] = {  # serif text at the size of a caption, thin lines, no top/right frame
    "font.family": "serif", "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "legend.fontsize": 7,
    "xtick.labelsize": 7, "ytick.labelsize": 7, "axes.linewidth": 0.6, "lines.linewidth": 1.2,
    "lines.markersize": 3.5, "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
    "grid.color": "#e6e6e6", "grid.linewidth": 0.5, "legend.frameon": False, "savefig.bbox": "tight",
    "svg.fonttype": "none", "pdf.fonttype": 42,
}
LEFT, RIGHT, BOTTOM, TOP = 0.09, 0.9, 0.13, 0.86  # the plotting area in figure fractions


def _title(spec: Any) -> str:
    return plain_text(spec.get("text", "") if isinstance(spec, Mapping) else spec)


def _axis_key(ref: str, letter: str) -> str:
    """Plotly's layout key of an axis reference: ``x`` → ``xaxis``, ``y3`` → ``yaxis3``."""
    return f"{letter}axis{ref[1:]}"


def _panels(data: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The (x axis, y axis) pairs the traces draw on, in order of first use; one panel when no traces."""
    pairs = [(str(t.get("xaxis", "x")), str(t.get("yaxis", "y"))) for t in data]
    return list(dict.fromkeys(pairs)) or [("x", "y")]


def _position(layout: Mapping[str, Any], panel: tuple[str, str],
              height_in: float) -> tuple[float, float, float, float]:
    """[left, bottom, width, height] of a panel in figure fractions, from the plotly axis domains."""
    x0, x1 = layout.get(_axis_key(panel[0], "x"), {}).get("domain", [0.0, 1.0])
    y0, y1 = layout.get(_axis_key(panel[1], "y"), {}).get("domain", [0.0, 1.0])
    pad_x, pad_y = (0.05 if x0 > 0 else 0.0), (0.35 / height_in if y1 < 1 else 0.0)  # room for tick labels
    width, height = RIGHT - LEFT, TOP - BOTTOM
    return (LEFT + x0 * width + pad_x, BOTTOM + y0 * height, (x1 - x0) * width - pad_x,
            (y1 - y0) * height - pad_y)


def _style_axis(ax: Any, axis: Mapping[str, Any], letter: str, show_ticks: bool) -> None:
    """Title, log type, range, percent ticks and reversal of one plotly axis on matplotlib ``ax``."""
    from matplotlib.ticker import FuncFormatter, MultipleLocator, PercentFormatter

    set_label, set_scale, set_lim = ((ax.set_xlabel, ax.set_xscale, ax.set_xlim) if letter == "x"
                                     else (ax.set_ylabel, ax.set_yscale, ax.set_ylim))
    target = ax.xaxis if letter == "x" else ax.yaxis
    if show_ticks and axis.get("title"):
        set_label(_title(axis["title"]))
    log = axis.get("type") == "log"
    if log:
        set_scale("log")
        plain = FuncFormatter(lambda value, _: f"{value:g}")  # 20, 30, 60 rather than 2×10¹
        target.set_major_formatter(plain)
        target.set_minor_formatter(log_minor_formatter(target))
    bounds = axis.get("range")
    if bounds is not None and len(bounds) == 2 and all(isinstance(b, int | float) for b in bounds):
        set_lim(*(10.0 ** b for b in bounds) if log else bounds)
    tickformat = str(axis.get("tickformat", ""))
    if tickformat.endswith("%"):  # ".1%": one decimal
        decimals = tickformat[1:-1] if tickformat.startswith(".") else ""
        target.set_major_formatter(PercentFormatter(1.0, decimals=int(decimals) if decimals.isdigit() else 0))
    if isinstance(axis.get("dtick"), int | float) and not log:
        target.set_major_locator(MultipleLocator(float(axis["dtick"])))
    if axis.get("autorange") == "reversed":
        (ax.invert_xaxis if letter == "x" else ax.invert_yaxis)()
    if axis.get("showticklabels") is False or not show_ticks:
        target.set_tick_params(labelbottom=False) if letter == "x" else target.set_tick_params(labelleft=False)
    if axis.get("tickangle"):
        target.set_tick_params(rotation=-float(axis["tickangle"]))


def _add_axes(fig: Any, layout: Mapping[str, Any], panels: Sequence[tuple[str, str]],
              height_in: float) -> dict[tuple[str, str], Any]:
    """One matplotlib Axes per panel; a y axis ``overlaying`` another becomes the twin (right axis) of its panel."""
    axes: dict[tuple[str, str], Any] = {}
    for panel in panels:
        base = str(layout.get(_axis_key(panel[1], "y"), {}).get("overlaying") or "")
        under = next((ax for (x, y), ax in axes.items() if x == panel[0] and y == base), None)
        axes[panel] = under.twinx() if under is not None else fig.add_axes(_position(layout, panel, height_in))
    return axes


def to_matplotlib(plotly_figure: Any, *, width_in: float = WIDTH_IN, height_in: float | None = None) -> Any:
    """The plotly figure (``go.Figure`` or its dict) drawn as a ``matplotlib.figure.Figure`` in :data:`PAPER_STYLE`.

    Height defaults to the plotly height scaled to ``width_in`` (plotly's width taken as 1000 px).
    The figure is not attached to pyplot (no global state), so it is freed with its last reference.
    """
    import matplotlib
    from matplotlib.figure import Figure

    spec = decode_arrays(plotly_figure.to_dict() if hasattr(plotly_figure, "to_dict") else dict(plotly_figure))
    data, layout = list(spec.get("data", [])), dict(spec.get("layout", {}))
    height_in = height_in or max(2.2, min(8.0, float(layout.get("height") or 420) / 1000 * width_in * 1.35))
    with matplotlib.rc_context(PAPER_STYLE):
        fig = Figure(figsize=(width_in, height_in))
        panels = _panels(data)
        axes = _add_axes(fig, layout, panels, height_in)
        stacked = [p for p in panels if not layout.get(_axis_key(p[1], "y"), {}).get("overlaying")]
        bottom_y = min(stacked, key=lambda p: layout.get(_axis_key(p[1], "y"), {}).get("domain", [0, 1])[0])[1]
        bars, colors = [t for t in data if t.get("type") == "bar"], colorway(layout)
        for index, trace in enumerate(data):
            panel = (str(trace.get("xaxis", "x")), str(trace.get("yaxis", "y")))
            draw_trace(fig, axes[panel], trace, bars=bars, barmode=str(layout.get("barmode", "group")),
                       color=colors[index % len(colors)])
        for (xref, yref), ax in axes.items():
            x_axis, y_axis = layout.get(_axis_key(xref, "x"), {}), layout.get(_axis_key(yref, "y"), {})
            shared = sum(1 for p in stacked if p[0] == xref) > 1
            _style_axis(ax, x_axis, "x", show_ticks=(not shared or yref == bottom_y) and (xref, yref) in stacked)
            _style_axis(ax, y_axis, "y", show_ticks=True)
            if y_axis.get("showgrid") is False:
                ax.grid(False)
        draw_shapes(axes, layout.get("shapes", []))
        draw_annotations(fig, axes, layout.get("annotations", []), (LEFT, BOTTOM, RIGHT, TOP))
        _legend(list(axes.values()), layout)
        fig.suptitle(_title(layout.get("title", "")), x=LEFT, y=0.99, ha="left", fontsize=9)
    return fig


def _legend(axes: list[Any], layout: Mapping[str, Any]) -> None:
    """One legend, in the first panel, when traces are named and plotly would show a legend."""
    handles, labels = [], []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    shown = layout.get("showlegend")
    if labels and (shown is True or (shown is None and len(labels) > 1)):
        if (layout.get("legend") or {}).get("orientation") == "h":  # plotly's row of entries under the plot
            axes[0].legend(handles, labels, loc="upper left", bbox_to_anchor=(0.0, -0.18), ncol=min(len(labels), 4))
        else:
            axes[0].legend(handles, labels, loc="best")


def _check_formats(formats: Sequence[str]) -> list[str]:
    chosen = [f.lower().lstrip(".") for f in formats]
    unknown = [f for f in chosen if f not in FORMATS]
    if unknown or not chosen:
        raise ToolkitError(f"figure format {', '.join(unknown) or '(none)'} is not supported; use {', '.join(FORMATS)}")
    return chosen


def save_figure(plotly_figure: Any, path: str | Path, formats: Sequence[str] = FORMATS, *,
                width_in: float = WIDTH_IN) -> list[Path]:
    """Write ``plotly_figure`` in paper style as ``path`` + ``.png``/``.pdf``/``.svg`` (each of ``formats``).

    ``path`` is a file stem (a suffix such as ``.png`` is dropped); its folder is created. Returns
    the files written. Raises :class:`ToolkitError` for an unknown format, before drawing.
    """
    chosen = _check_formats(formats)
    stem = Path(path)
    stem = stem.with_suffix("") if stem.suffix.lstrip(".").lower() in FORMATS else stem
    stem.parent.mkdir(parents=True, exist_ok=True)
    fig = to_matplotlib(plotly_figure, width_in=width_in)
    written = []
    for fmt in chosen:
        target = stem.with_name(f"{stem.name}.{fmt}")
        fig.savefig(target, format=fmt, dpi=DPI, bbox_inches="tight")
        written.append(target)
    return written


def png_bytes(plotly_figure: Any, *, width_in: float = WIDTH_IN, dpi: int = 110) -> bytes:
    """The figure as PNG bytes (screen resolution by default): the static fallback of a notebook output."""
    buffer = io.BytesIO()
    to_matplotlib(plotly_figure, width_in=width_in).savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()
