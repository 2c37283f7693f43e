"""HTML panels and layout helpers of the notebook widgets (no widgets here: plain strings and figures).

- :func:`generations_html`: the dense and the pruned model's greedy continuations of the fixed
  prompts side by side, each with its tokens/s (new tokens / wall seconds, prefill included), the
  point where the pruned text leaves the dense one marked, and the mean speed of each model.
- :func:`snapshot_html`: the dashboard's figures as inline PNG images (drawn by matplotlib from
  the same figure data), kept in the saved notebook so a re-opened or converted notebook still
  shows what the run drew.
- :data:`STALE_NOTE`: what a saved notebook shows where the live widget cannot be restored.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

STALE_NOTE = ("PruneLab dashboard: its live views need a running kernel. Re-run this cell to see them; "
              "the figures of a finished run are kept as images below the widget.")
FLEX_ROW = {"display": "flex", "flex_flow": "row wrap", "width": "calc(100% - 8px)", "align_items": "flex-start"}
PANEL_PX = 460  # a live plot's width: two side by side in a 1440 px JupyterLab with its file browser open
# a panel wraps to the next row when the row is too narrow, and scrolls (never clips) below one plot's width
PANEL = {"flex": "0 1 auto", "max_width": "100%", "overflow": "auto"}
FIELD = {"flex": "1 1 230px", "width": "auto", "min_width": "180px"}


def _speed(new_tokens: int, seconds: float) -> float:
    return new_tokens / seconds if seconds > 0 else math.nan


def _divergence(dense: str, pruned: str) -> int:
    """Index of the first character where ``pruned`` leaves ``dense`` (the shorter length if one extends the other)."""
    for index, (a, b) in enumerate(zip(dense, pruned, strict=False)):
        if a != b:
            return index
    return min(len(dense), len(pruned))


def _cell(text: Any, split: int | None) -> str:
    if text is None:
        return '<td style="vertical-align:top">…</td>'
    body = str(text.text)
    if split is not None and split < len(body):  # the part after the divergence in colour
        shown = f'{escape(body[:split])}<span style="color:#b2182b">{escape(body[split:])}</span>'
    else:
        shown = escape(body)
    speed = _speed(int(text.new_tokens), float(text.seconds))
    return (f'<td style="vertical-align:top;max-width:40em"><div style="white-space:pre-wrap;font-family:monospace">'
            f"{shown}</div><small>{text.new_tokens} tokens · {speed:.1f} tokens/s</small></td>")


def generations_html(texts: Mapping[str, Sequence[Any]]) -> str:
    """Side-by-side table of ``texts["dense"]`` and ``texts["pruned"]`` (Generated events, in prompt order).

    Red marks where the pruned continuation first differs from the dense one. Returns "" when
    there are no texts.
    """
    dense, pruned = list(texts.get("dense", [])), list(texts.get("pruned", []))
    if not dense and not pruned:
        return ""
    rows = []
    for index, first in enumerate(dense or pruned):
        a = dense[index] if index < len(dense) else None
        b = pruned[index] if index < len(pruned) else None
        split = _divergence(a.text, b.text) if a is not None and b is not None else None
        rows.append(f'<tr><td style="vertical-align:top"><b>{escape(first.prompt)}</b></td>'
                    f"{_cell(a, None)}{_cell(b, split)}</tr>")
    means = [_mean_speed(dense), _mean_speed(pruned)]
    foot = " · ".join(f"{name} {speed:.1f} tokens/s" for name, speed in zip(("dense", "pruned"), means, strict=True)
                      if math.isfinite(speed))
    return ('<table class="prunelab-generations"><thead><tr><th>prompt</th><th>dense</th><th>pruned</th></tr>'
            f"</thead><tbody>{''.join(rows)}</tbody></table><small>greedy decoding, no chat template; "
            f"red = where the pruned text leaves the dense one; mean {foot or 'n/a'}</small>")


def _mean_speed(texts: Sequence[Any]) -> float:
    """All new tokens over all seconds of one model's generations (nan without any)."""
    tokens, seconds = sum(int(t.new_tokens) for t in texts), sum(float(t.seconds) for t in texts)
    return _speed(tokens, seconds)


def snapshot_html(figures: Sequence[Any], title: str) -> str:
    """``figures`` (plotly) as inline PNG ``<img>`` tags under a caption, wrapping in rows."""
    from toolkit.figures.paper import png_bytes

    images = "".join(
        f'<img style="flex:1 1 460px;min-width:0;max-width:100%" alt="{escape(str(fig.layout.title.text or ""))}" '
        f'src="data:image/png;base64,{base64.b64encode(png_bytes(fig)).decode("ascii")}">' for fig in figures)
    return (f'<details open><summary>{escape(title)}</summary>'
            f'<div style="display:flex;flex-flow:row wrap;gap:8px">{images}</div></details>')
