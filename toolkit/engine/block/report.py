"""Events and records of a block-scope run (pure functions of what the block engine measured).

- :func:`layer_scored_event`: pass 1, one layer's head-unit scores and channel-score quantiles;
- :func:`global_ranking_event`: the plan, a sorted subsample of every candidate's ranking score;
- :func:`layer_events`: pass 2, ``SublayerPruned`` per replaced Linear (``sparsity`` = fraction of
  its weights removed, ``rel_error`` = o/down output error after compensation on the statistics
  used, nan for the row-sliced q/k/v/gate/up) and ``UnitsRemoved`` per kind;
- :func:`layer_record`: the JSON-able structure of one layer for the run store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from toolkit.engine.block.plan import Allocation, LayerCandidates
from toolkit.engine.block.shrink import LayerEdit
from toolkit.events import Event, GlobalRanking, LayerScored, SublayerPruned, UnitsRemoved
from toolkit.methods.block.base import UnitScores
from toolkit.models.structure import ATTN_ROLES, MLP_ROLES, BlockView

RANKING_POINTS = 256
QUANTILES = (0.0, 0.25, 0.5, 0.75, 1.0)


def layer_scored_event(index: int, num_layers: int, scores: UnitScores, seconds: float) -> LayerScored:
    """``LayerScored`` from one layer's scores."""
    heads = [] if scores.heads is None else [float(x) for x in scores.heads.float().cpu()]
    quantiles = [] if scores.channels is None else torch.quantile(
        scores.channels.double().cpu(), torch.tensor(QUANTILES, dtype=torch.float64)).tolist()
    return LayerScored(layer=index, num_layers=num_layers, head_scores=heads, channel_quantiles=quantiles,
                       seconds=seconds)


def global_ranking_event(method: str, allocation_name: str, ratio: float, allocation: Allocation,
                         layers: list[LayerCandidates]) -> GlobalRanking:
    """``GlobalRanking`` with ≤ 256 evenly spaced points of the sorted ranking scores."""
    ranked = allocation.ranked
    picks = torch.linspace(0, len(ranked) - 1, min(RANKING_POINTS, len(ranked))).round().long()
    counts = {}
    for kind, masks in (("heads", allocation.keep_heads), ("channels", allocation.keep_channels)):
        present = [m for m in masks if m is not None]
        counts[kind] = (sum(int((~m).sum()) for m in present), sum(len(m) for m in present))
    points = _ranking_points(allocation)
    return GlobalRanking(method=method, allocation=allocation_name, ratio=ratio,
                         achieved_ratio=allocation.achieved_ratio, threshold=allocation.threshold,
                         scores=[float(x) for x in ranked[picks]], heads_removed=counts["heads"][0],
                         heads_total=counts["heads"][1], channels_removed=counts["channels"][0],
                         channels_total=counts["channels"][1], params_removed=allocation.removed_cost,
                         params_total=allocation.total_cost, candidates=len(ranked), **points)


def _ranking_points(allocation: Allocation) -> dict[str, list]:
    """Rank and score of every head unit and of ≤ 256 evenly spaced channels in the ascending ranking."""
    kinds = allocation.ranked_kind
    if kinds is None:
        return {}
    points: dict[str, list] = {}
    for kind_id, kind in enumerate(("head", "channel")):
        ranks = torch.nonzero(kinds == kind_id).flatten()
        if kind == "channel" and len(ranks) > RANKING_POINTS:
            ranks = ranks[torch.linspace(0, len(ranks) - 1, RANKING_POINTS).round().long()]
        points[f"{kind}_ranks"] = [int(r) for r in ranks]
        points[f"{kind}_values"] = [float(allocation.ranked[r]) for r in ranks]
    return points


@dataclass
class LayerOutcome:
    """What pass 2 did to one layer: old shapes and parameter counts, errors per o/down, the edit."""

    index: int
    view: BlockView
    shapes: dict[str, list[int]]
    params_before: dict[str, int]
    errors: dict[str, tuple[float, float, float]]
    edit: LayerEdit
    kinds: tuple[bool, bool]  # heads, channels are candidates
    seconds: float


def _removed_fraction(weight: torch.Tensor, old: list[int], columns: bool) -> float:
    """Fraction of the old weights gone: by shape when removed, by all-zero rows/columns when masked."""
    if list(weight.shape) != old:
        return 1.0 - weight.numel() / (old[0] * old[1])
    return float((weight == 0).all(0 if columns else 1).float().mean())


def _sublayer_events(outcome: LayerOutcome) -> list[SublayerPruned]:
    view, edit = outcome.view, outcome.edit
    roles = (ATTN_ROLES if edit.keep_heads is not None else ()) + (
        tuple(r for r in MLP_ROLES if view.has(r)) if edit.keep_channels is not None else ())
    events = []
    for role in roles:
        old = outcome.shapes[role]
        new = list(view.linear(role).weight.shape)
        err, plain, damp = outcome.errors.get("o" if role in ATTN_ROLES else "down", (math.nan,) * 3)
        measured = role in ("o", "down")
        removed = _removed_fraction(view.linear(role).weight, old, measured)
        events.append(SublayerPruned(
            layer=outcome.index, name=view.name(role), shape=old, sparsity=removed,
            rel_error=err if measured else math.nan, rel_error_dense=math.nan,
            damping=damp if measured else math.nan, seconds=outcome.seconds / len(roles),
            info={"new_shape": new, "rel_error_uncompensated": plain if measured else math.nan,
                  "unit": "heads" if role in ATTN_ROLES else "channels"}))
    return events


def _units_events(outcome: LayerOutcome) -> list[UnitsRemoved]:
    view, edit, index = outcome.view, outcome.edit, outcome.index
    dh = view.head_dim
    events = []
    if outcome.kinds[0]:
        heads = outcome.shapes["q"][0] // dh
        kv = outcome.shapes["k"][0] // dh
        keep = edit.keep_heads.cpu() if edit.keep_heads is not None else torch.ones(heads, dtype=torch.bool)
        kv_kept = int(keep.view(kv, -1).any(1).sum())
        err, plain, _ = outcome.errors.get("o", (0.0, 0.0, math.nan))
        after = view.params(ATTN_ROLES)
        kv_keep = keep.view(kv, -1).any(1)
        for unit, kept, total, mask in (("heads", int(keep.sum()), heads, keep), ("kv_heads", kv_kept, kv, kv_keep)):
            events.append(UnitsRemoved(layer=index, unit=unit, kept=kept, removed=total - kept,
                                       params_before=outcome.params_before["attn"], params_after=after,
                                       rel_error=err, rel_error_uncompensated=plain, kept_map=kept_map(mask)))
    if outcome.kinds[1]:
        total = outcome.shapes["down"][1]
        mask = edit.keep_channels.cpu() if edit.keep_channels is not None else torch.ones(total, dtype=torch.bool)
        kept = int(mask.sum())
        err, plain, _ = outcome.errors.get("down", (0.0, 0.0, math.nan))
        after = view.params(tuple(r for r in MLP_ROLES if view.has(r)))
        events.append(UnitsRemoved(layer=index, unit="channels", kept=kept, removed=total - kept,
                                   params_before=outcome.params_before["mlp"], params_after=after,
                                   rel_error=err, rel_error_uncompensated=plain, kept_map=kept_map(mask)))
    return events


def kept_map(keep: torch.Tensor) -> str:
    """A keep-mask (units,) as a string of "1" (kept) and "0" (removed).

    >>> kept_map(torch.tensor([True, False, True]))
    '101'
    """
    return "".join("1" if k else "0" for k in keep.tolist())


def layer_events(outcome: LayerOutcome) -> list[Event]:
    """``SublayerPruned`` per replaced Linear, then ``UnitsRemoved`` per candidate kind."""
    return [*_sublayer_events(outcome), *_units_events(outcome)]


def layer_record(index: int, view: BlockView, changes: dict) -> dict:
    """The structure of one layer after pass 2 (JSON-able): counts, kept heads/KV heads/channels."""
    record = {"layer": index, "num_heads": view.num_heads, "num_kv_heads": view.num_kv_heads,
              "heads_kept": list(range(view.num_heads)), "kv_heads": list(range(view.num_kv_heads)),
              "kv_group": view.n_rep, "intermediate_size": view.intermediate,
              "channels_kept": list(range(view.intermediate))}
    record.update(changes)
    return record
