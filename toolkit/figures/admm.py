"""ALPS's ADMM trace of one linear (CONTRIBUTING.md R8): a pure builder, no I/O, no torch.

ALPS (:mod:`toolkit.methods.alps`) emits a SolverStep per support check with ``values`` ``rho`` (the
penalty ρ), ``primal`` = ‖Ŵ − D‖/‖W̃‖, ``dual`` = ρ‖D − D_prev‖/‖W̃‖ and ``support_change`` (the share
of the kept weights whose support changed since the last check); its PCG steps carry no ``rho``.
:func:`admm_figure` draws them in the panel where FISTAPruner's λ bisection goes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from toolkit.events import SolverStep
from toolkit.figures.run import (
    LAMBDA_HEIGHT,
    PALETTE,
    base_layout,
    figure,
    gaps,
    note_figure,
    panel_title,
    stacked,
    thin,
)


def has_admm_trace(steps: Sequence[SolverStep]) -> bool:
    """True when the steps carry an ADMM penalty (ALPS's trace)."""
    return any("rho" in step.values for step in steps)


def _log_axis(values: Sequence[float]) -> str:
    """"log" when every finite value is positive, else "linear" (a support change of 0 is drawn as a gap)."""
    finite = [v for v in values if math.isfinite(v)]
    return "log" if finite and min(finite) > 0 else "linear"


def admm_figure(steps: Sequence[SolverStep], *, revision: Any = None) -> go.Figure:
    """ALPS's ADMM trace for one linear: three panels sharing the iteration axis.

    1. the penalty ρ (log): it rises while the support still moves (×1.3, ×1.2, ×1.1);
    2. the primal residual ‖Ŵ − D‖/‖W̃‖ and the dual residual ρ‖D − D_prev‖/‖W̃‖ (log);
    3. the share of kept weights whose support changed since the last check (log; zero = a gap): ADMM
       stops once it is (nearly) zero.
    """
    height = LAMBDA_HEIGHT
    steps = thin([s for s in steps if "rho" in s.values])
    if not steps:
        return note_figure("ADMM trace", "ALPS's penalty, residuals and support changes appear here", height, revision)
    first = steps[0]
    x = [s.step for s in steps]

    def series(key: str, positive: bool = False) -> list[float]:
        values = [s.values.get(key, math.nan) for s in steps]
        return [v if not positive or v > 0 else math.nan for v in values]

    def line(key: str, name: str, axis: int, color: str, positive: bool = False) -> dict[str, Any]:
        return {"type": "scatter", "mode": "lines+markers", "name": name, "x": x, "y": gaps(series(key, positive)),
                "xaxis": "x", "yaxis": f"y{axis if axis > 1 else ''}", "marker": {"size": 4, "color": color},
                "line": {"color": color}}

    data = [line("rho", "ρ", 1, PALETTE[0]), line("primal", "primal ‖Ŵ − D‖", 2, PALETTE[1], positive=True),
            line("dual", "dual ρ‖ΔD‖", 2, PALETTE[2], positive=True),
            line("support_change", "support change", 3, PALETTE[3], positive=True)]
    domains = stacked(3)
    titles = ("penalty ρ", "primal and dual residuals (÷‖W̃‖)", "support changed since the last check (÷ kept)")
    residuals = series("primal", True) + series("dual", True)
    layout = base_layout(f"alps ADMM · layer {first.layer} · {first.name}", height, revision,
                         margin={"l": 60, "r": 20, "t": 64, "b": 40}, showlegend=False,
                         xaxis={"anchor": "y3", "title": {"text": "iteration"}},
                         yaxis={"domain": domains[0], "title": {"text": "ρ"}, "type": _log_axis(series("rho"))},
                         yaxis2={"domain": domains[1], "title": {"text": "residual"}, "type": _log_axis(residuals)},
                         yaxis3={"domain": domains[2], "title": {"text": "changed"},
                                 "type": _log_axis(series("support_change", True))},
                         annotations=[panel_title(t, 0.5, d[1]) for t, d in zip(titles, domains, strict=True)])
    return figure(data, layout)
