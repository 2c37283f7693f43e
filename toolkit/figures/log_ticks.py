"""Readable ticks for every logarithmic axis (CONTRIBUTING.md R8): a labelled tick at every decade.

Plotly's own log ticks label the minor ticks of a short range with their leading digit only, so
between 100 and 1000 a 500 reads "5" and a perplexity of 464 sits next to a "5". Here every log
axis gets explicit ticks, each labelled with its whole value:

- a tick at every decade the data reaches (1, 10, 100, 1000 …), always labelled;
- under two decades of data, the 2 and 5 multiples of each decade as well (20, 50, 200, 500);
- under one decade, every multiple 1…9 (20, 30, 40 …);
- under two decades the axis range is set to the enclosing ticks (a little padded), so a short
  range always shows at least two labelled ticks.

:func:`readable_` applies it to a figure's plain layout dict from the traces drawn on each axis
(y values with their error bars); :func:`toolkit.figures.run.figure` calls it for every figure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MINOR_UNDER_TWO = (2, 5)  # multiples labelled when the data spans under two decades
MINOR_UNDER_ONE = (2, 3, 4, 5, 6, 7, 8, 9)  # … and under one decade
PAD = 0.03  # of the range, in log units, on each side when the range is set


def tick_label(value: float) -> str:
    """A tick's whole value: ``0.001``, ``20``, ``500``, ``1000``, ``2e+06``; never a bare leading digit.

    >>> [tick_label(v) for v in (0.001, 20.0, 500.0, 1000.0, 2e6, 1e-5)]
    ['0.001', '20', '500', '1000', '2e+06', '1e-05']
    """
    if 1e-4 <= abs(value) < 1e5:
        return f"{value:.6g}"
    return f"{value:.0e}"


def log_ticks(values: Iterable[Any]) -> tuple[list[float], list[str], list[float] | None]:
    """Tick values, their labels and (for a range under two decades) the axis range in log10 units.

    ``values`` are the data drawn on the axis; non-numbers, nan and values ≤ 0 are ignored. No
    positive value gives no ticks (plotly's defaults stay).

    >>> log_ticks([3.0, 4500.0])[:2]
    ([1.0, 10.0, 100.0, 1000.0, 10000.0], ['1', '10', '100', '1000', '10000'])
    >>> log_ticks([120.0, 464.0])[1]
    ['100', '200', '300', '400', '500']
    >>> log_ticks([40.0, 900.0])[1]
    ['20', '50', '100', '200', '500', '1000']
    """
    positive = [v for v in _numbers(values) if v > 0]
    if not positive:
        return [], [], None
    low, high = min(positive), max(positive)
    span = math.log10(high) - math.log10(low)
    multiples = (1, *MINOR_UNDER_ONE) if span < 1 else (1, *MINOR_UNDER_TWO) if span < 2 else (1,)
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    candidates = sorted({_round(m * 10.0 ** k) for k in range(first, last + 1) for m in multiples})
    if span >= 2:
        ticks = [t for t in candidates if low / 10 < t <= high * 10]
        return ticks, [tick_label(t) for t in ticks], None
    below = max((t for t in candidates if t <= low), default=candidates[0])
    above = min((t for t in candidates if t >= high), default=candidates[-1])
    ticks = [t for t in candidates if below <= t <= above]
    lo, hi = math.log10(below), math.log10(above)
    pad = PAD * max(hi - lo, 0.1)
    return ticks, [tick_label(t) for t in ticks], [lo - pad, hi + pad]


def _round(value: float) -> float:
    """``m · 10^k`` without the float noise of the power (3 · 0.1 → 0.3)."""
    return float(f"{value:.6g}")


def _numbers(values: Iterable[Any]) -> Iterable[float]:
    for value in values:
        if isinstance(value, (list, tuple)):
            yield from _numbers(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            yield float(value)
        elif callable(getattr(value, "tolist", None)):  # a numpy array or scalar
            listed = getattr(value, "tolist")()  # noqa: B009 - the attribute is not known to the type checker
            yield from _numbers(listed if isinstance(listed, list) else [listed])


def axis_values(traces: Sequence[Mapping[str, Any]], axis_key: str) -> list[float]:
    """The values the traces draw on layout axis ``axis_key`` (``yaxis``, ``xaxis2`` …), error bars included."""
    letter, suffix = axis_key[0], axis_key[len("xaxis"):]
    ref = letter + suffix  # "y", "y2"
    values: list[float] = []
    for trace in traces:
        drawn = trace.get("type", "scatter") in ("scatter", "scattergl", "bar")
        if not drawn or str(trace.get(f"{letter}axis", letter)) != ref:
            continue
        data = list(_numbers(trace.get(letter) or []))
        values += data
        bars = trace.get(f"error_{letter}") or {}
        spread = list(_numbers(bars.get("array") or [])) if bars.get("visible", True) else []
        if len(spread) == len(data):
            values += [v + s for v, s in zip(data, spread, strict=True)]
            values += [v - s for v, s in zip(data, spread, strict=True) if v - s > 0]
    return values


def readable_(layout: dict[str, Any], traces: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Give every log axis of ``layout`` without its own ticks the ticks of :func:`log_ticks`; in place, returned.

    An axis that sets ``tickvals`` or ``dtick`` keeps them; so does one whose range the builder set.
    """
    for key in [k for k in layout if k.startswith(("xaxis", "yaxis"))]:
        axis = layout[key]
        if not isinstance(axis, dict) or axis.get("type") != "log" or "tickvals" in axis or axis.get("dtick"):
            continue
        ticks, labels, bounds = log_ticks(axis_values(traces, key))
        if not ticks:
            continue
        axis.update(tickmode="array", tickvals=ticks, ticktext=labels)
        if bounds is not None and axis.get("range") is None:
            axis["range"] = bounds
    return layout
