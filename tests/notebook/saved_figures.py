"""What a saved notebook's figure outputs hold, read back from the .ipynb (helpers of the notebook tests).

- :func:`expected_colors`: the colours plotly draws a figure's traces and reference lines in, read
  from its JSON as plotly does (a trace's own colour, else the colorway entry of its index),
  independently of the redraw in ``toolkit.figures.paper``.
- :func:`png_has_color`: whether a PNG has at least ``min_pixels`` pixels within ``tolerance`` of
  an RGB colour (lines are anti-aliased, so their centre pixels carry the colour).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

PLOTLY = "application/vnd.plotly.v1+json"
PLOTLY_DEFAULT = ("#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880",
                  "#FF97FF", "#FECB52")


def figure_outputs(notebook: Any) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """(cell index, output) of every output that carries a plotly figure."""
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if PLOTLY in output.get("data", {}):
                yield index, output


def output_texts(notebook: Any) -> Iterator[str]:
    """Every text an output shows: streams, plain text and HTML (widget views included as their JSON)."""
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if "text" in output:
                yield str(output["text"])
            for value in output.get("data", {}).values():
                yield value if isinstance(value, str) else str(value)


def rgb(color: str) -> tuple[int, int, int]:
    """``#rrggbb`` / ``#rgb`` / ``rgb(r, g, b)`` as an RGB triple."""
    color = color.strip()
    if color.startswith("rgb"):
        return tuple(int(float(v)) for v in color[color.index("(") + 1:-1].split(",")[:3])  # type: ignore[return-value]
    digits = color.lstrip("#")
    digits = "".join(c * 2 for c in digits) if len(digits) == 3 else digits
    return int(digits[0:2], 16), int(digits[2:4], 16), int(digits[4:6], 16)


def expected_colors(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(what, colour) for every bar, line and marker colour and every line shape of a plotly figure dict."""
    layout = spec.get("layout", {})
    way = layout.get("colorway") or ((layout.get("template") or {}).get("layout") or {}).get("colorway")
    way = list(way or PLOTLY_DEFAULT)
    found = []
    for index, trace in enumerate(spec.get("data", [])):
        kind = trace.get("type", "scatter")
        if kind not in ("scatter", "bar", "histogram"):
            continue
        marker = (trace.get("marker") or {}).get("color")
        own = (trace.get("line") or {}).get("color") if kind == "scatter" else None
        colors = [marker] if isinstance(marker, str) else list(marker) if isinstance(marker, list) else []
        markers = "markers" in str(trace.get("mode", "markers")) and isinstance(marker, str) and marker != own
        colors = ([own, marker] if markers else [own]) if own else colors or [way[index % len(way)]]
        opacity = (trace.get("marker") or {}).get("opacity", 1.0) if kind == "bar" else 1.0
        alpha = float(trace.get("opacity", 1.0)) * (float(opacity) if isinstance(opacity, int | float) else 1.0)
        found += [(f"trace {index} {trace.get('name') or kind}", _on_white(c, alpha)) for c in colors
                  if isinstance(c, str)]
    for shape in layout.get("shapes", []):
        if shape.get("type") == "line":
            found.append(("reference line", str((shape.get("line") or {}).get("color") or "#444")))
    return found


def _on_white(color: str, alpha: float) -> str:
    """``color`` drawn with opacity ``alpha`` over a white page, as ``#rrggbb``."""
    mixed = [round(alpha * v + (1 - alpha) * 255) for v in rgb(color)]
    return "#" + "".join(f"{v:02x}" for v in mixed)


def png_pixels(data: str) -> np.ndarray:
    """The base64 PNG of an output as an (h, w, 3) uint8 array."""
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(data))) as image:
        return np.asarray(image.convert("RGB"))


def png_has_color(pixels: np.ndarray, color: str, *, tolerance: int = 12, min_pixels: int = 8) -> bool:
    """At least ``min_pixels`` pixels within ``tolerance`` (per channel) of ``color``."""
    close = np.all(np.abs(pixels.astype(np.int16) - np.asarray(rgb(color), dtype=np.int16)) <= tolerance, axis=-1)
    return int(close.sum()) >= min_pixels
