"""The recovery loss curve (CONTRIBUTING.md R8): a pure builder of plain data, no I/O, no torch.

:func:`loss_figure` draws the causal-LM loss of every recovery step (thin) and its running mean
over :data:`SMOOTH` steps (bold), on an x axis fixed to the run's steps so a live curve grows
without rescaling. The title gives the perplexity before → after when known.
:func:`recovery_figure` draws a :class:`~toolkit.live.recovery.RecoveryView`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from toolkit.figures.run import PALETTE, base_layout, figure, gaps, note_figure, thin
from toolkit.live.recovery import RecoveryView

SMOOTH = 5  # steps in the running mean
TITLE = "recovery loss (masked LoRA)"
FULL_TITLE = "recovery loss (full fine-tune)"  # recover --train full


def running_mean(values: Sequence[float], width: int = SMOOTH) -> list[float]:
    """The mean of each value and the ``width − 1`` before it (fewer at the start); nan values are skipped."""
    out = []
    for i in range(len(values)):
        window = [v for v in values[max(0, i - width + 1): i + 1] if math.isfinite(v)]
        out.append(sum(window) / len(window) if window else math.nan)
    return out


def loss_figure(steps: Sequence[int], losses: Sequence[float], *, total_steps: int = 0,
                perplexity: Mapping[str, tuple[float, float]] | None = None, revision: Any = None,
                title: str = TITLE) -> go.Figure:
    """Loss per step (``steps`` 1-based, ``losses`` mean token NLL) and its running mean.

    ``total_steps`` fixes the x axis (0: the steps drawn). ``perplexity`` maps a dataset to
    (before, after); nan where not measured. ``revision`` keeps the user's zoom across redraws.
    """
    title = title + "".join(f" · ppl {name} {_fmt(before)} → {_fmt(after)}"
                            for name, (before, after) in (perplexity or {}).items())
    if not steps:
        return note_figure(title, "the loss of every step appears here as the recovery trains", revision=revision)
    points = thin(list(zip(steps, losses, running_mean(losses), strict=True)))
    xs = [p[0] for p in points]
    data = [
        {"type": "scatter", "mode": "lines", "name": "loss per step", "x": xs, "y": gaps([p[1] for p in points]),
         "line": {"color": PALETTE[0], "width": 1}, "opacity": 0.45,
         "hovertemplate": "step %{x}<br>loss %{y:.4f}<extra></extra>"},
        {"type": "scatter", "mode": "lines", "name": f"mean of {SMOOTH} steps", "x": xs,
         "y": gaps([p[2] for p in points]), "line": {"color": PALETTE[0], "width": 2.5},
         "hovertemplate": "step %{x}<br>mean loss %{y:.4f}<extra></extra>"},
    ]
    last = max(total_steps, int(steps[-1]))
    layout = base_layout(title, revision=revision,
                         xaxis={"title": {"text": "step"}, "range": [0.5, last + 0.5]},
                         yaxis={"title": {"text": "causal-LM loss (mean token NLL)"}},
                         legend={"orientation": "h", "y": -0.25})
    return figure(data, layout)


def recovery_figure(view: RecoveryView) -> go.Figure:
    """The loss curve of a :class:`RecoveryView`, perplexity before → after in the title."""
    perplexity = {name: (before, after) for name, before, after in view.result_rows()}
    return loss_figure(view.step_numbers, view.losses, total_steps=view.steps, perplexity=perplexity,
                       revision=view.run_id or "idle",
                       title=FULL_TITLE if view.options.get("train") == "full" else TITLE)


def _fmt(value: float) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) and math.isfinite(value) else "…"
