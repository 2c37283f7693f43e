"""The frontier of a run store: each finished run as a :class:`~toolkit.figures.frontier.FrontierPoint`.

A run's point comes from its ``result.json``: the perplexity of its evaluation and the ``bought``
section (:mod:`toolkit.run.bought`): decode tokens/s at batch 1 over the dense model's, timed in
the run (``by_batch`` / ``dense_by_batch``; runs from before those fields give their
``tokens_per_s`` ratio, prefill included), and ``bytes_stored`` (an estimate unless
``bytes_measured``). Only runs of one model under one evaluation protocol are comparable: the
newest run with a perplexity picks them (a recovery is a run of its parent's model and protocol,
labelled with its parent's method and its loss), and the dense source is a point of its own (its
perplexity as those runs measured it, speed 1, its bytes stored dense as counted). Used by the
app's Sweep tab (``app/frontier_view.py``) and ``notebooks/08_frontier.ipynb``. Torch-free.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolkit.figures.frontier import FrontierPoint, pareto_front, size_text, speed_of
from toolkit.store.runs import RunRecord

NOT_MEASURED = "not measured (save the model and run `python -m toolkit measure DIR` on it)"
NO_RECORD = "its result.json has no `bought` section (a run from before it was recorded)"
NO_DENSE = "No run drawn measured the dense model's perplexity (`--eval-dense`): the dense point is missing."


@dataclass
class StoreFrontier:
    """The points of one model and protocol (dense first), the runs listed without a speed, what was left out."""

    points: list[FrontierPoint] = field(default_factory=list)
    unmeasured: list[str] = field(default_factory=list)  # ``label: reason`` of runs with a perplexity and no speed
    model: str = ""
    other: int = 0  # finished runs with a perplexity of another model or evaluation protocol

    def front(self) -> list[bool | None]:
        """Per point: on the perplexity–speed front (None: no speed)."""
        return pareto_front(self.points, speed_of)


def _first(values: Any) -> float | None:
    value = next(iter(values.values()), None) if isinstance(values, Mapping) and values else None
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _key(record: RunRecord) -> str:
    """What makes two runs' perplexities comparable: the model and the evaluation protocol."""
    result = record.result or {}
    evaluation = (result.get("protocol") or {}).get("evaluation")
    return json.dumps([record.config.get("model"), evaluation], sort_keys=True, default=str)


def speed_ratio(speed: Mapping[str, Any] | None) -> float | None:
    """A run's decode tokens/s at batch 1 over the dense model's, from ``bought.speed`` (None: not timed)."""
    if not speed:
        return None
    mine, dense = speed.get("by_batch") or [], speed.get("dense_by_batch") or []
    if mine and dense and dense[0].get("decode_tokens_per_s"):
        return float(mine[0]["decode_tokens_per_s"]) / float(dense[0]["decode_tokens_per_s"])
    if speed.get("dense_tokens_per_s") and speed.get("tokens_per_s") is not None:
        return float(speed["tokens_per_s"]) / float(speed["dense_tokens_per_s"])
    return None


def run_label(record: RunRecord) -> str:
    """``method label``; a recovery names its parent's method and its loss (``numerical 20% + kd recovery``)."""
    config = record.config
    if config.get("method") != "recover":
        return f"{config.get('method', '?')} {record.label}"
    return f"{config.get('parent_method', '?')} {record.label} + {config.get('loss', 'lm')} recovery"


def run_point(record: RunRecord) -> FrontierPoint:
    """The point of one finished run (``speed`` None when the run did not time it)."""
    result = record.result or {}
    bought = result.get("bought") or {}
    stored = bought.get("bytes_stored")
    return FrontierPoint(label=run_label(record), ppl=_first(result.get("ppl")) or math.nan,
                         speed=speed_ratio(bought.get("speed")), bytes=int(stored) if stored is not None else None,
                         estimated=not bought.get("bytes_measured", False), group=str(bought.get("stored_as", "")),
                         note=f"run {record.run_id} ({(result.get('versions') or {}).get('git', '?')})")


def store_frontier(records: Sequence[RunRecord]) -> StoreFrontier:
    """The frontier of the runs (newest first, as :func:`toolkit.store.runs.list_runs` gives them)."""
    evaluated = [r for r in records if r.status == "finished" and _first((r.result or {}).get("ppl")) is not None]
    if not evaluated:
        return StoreFrontier()
    key = _key(evaluated[0])
    mine = [r for r in evaluated if _key(r) == key]
    frontier = StoreFrontier(model=str(mine[0].config.get("model", "?")), other=len(evaluated) - len(mine))
    dense_ppl = next((p for r in mine if (p := _first((r.result or {}).get("dense_ppl"))) is not None), None)
    dense_bytes = next((b for r in mine if (b := ((r.result or {}).get("bought") or {}).get("bytes_dense"))), None)
    if dense_ppl is not None:
        frontier.points.append(FrontierPoint("dense", dense_ppl, 1.0, dense_bytes, estimated=True, group="dense",
                                             note="the source model: bytes counted dense in its dtype"))
    for record in mine:
        point = run_point(record)
        if point.speed is None:
            bought = (record.result or {}).get("bought")
            why = (f"stored {bought.get('stored_as', '?')}, {size_text(point)}): {NOT_MEASURED}" if bought
                   else f"no size or speed recorded): {NO_RECORD}")
            frontier.unmeasured.append(f"{point.label} ({record.run_id}, {why}")
        frontier.points.append(point)
    return frontier


def summary_lines(frontier: StoreFrontier) -> list[str]:
    """Markdown lines: which runs are on the front, which have no measured speed, what was left out."""
    if not frontier.points:
        return ["No finished run with a perplexity in the run store yet."]
    front = frontier.front()
    on = [p.label for p, flag in zip(frontier.points, front, strict=True) if flag]
    off = [p.label for p, flag in zip(frontier.points, front, strict=True) if flag is False]
    lines = [f"**{frontier.model}**, {len(frontier.points)} outputs. On the perplexity–speed front: "
             + (", ".join(on) if on else "none (no run has a measured speed)")
             + (f"; behind it: {', '.join(off)}." if off else ".")]
    if not any(p.group == "dense" for p in frontier.points):
        lines.append(NO_DENSE)
    lines += [f"- {line}" for line in frontier.unmeasured]
    if frontier.other:
        lines.append(f"{frontier.other} finished run(s) of another model or evaluation protocol are not drawn: "
                     "their perplexities are not comparable with these.")
    return lines
