"""Global allocation: one ranking of every head unit and MLP channel of every layer (Eq. 8, §3.3).

Each layer offers its units' scores (higher = keep) and the parameters one unit owns (from the real
shapes, :func:`toolkit.models.structure.unit_costs`). Two readings of Eq. 8 (notes §1.6):

- ``param_weighted`` (default): sort all candidates by score, ascending, and remove in that order
  until the removed parameters are closest to ρ × (parameters of all candidate units) — FLAP's
  cumulative-cost threshold, where a head costs α = 4·Dh/3 channels (its real cost under GQA).
- ``paper_literal``: Ψ = α·{z_head} ∪ {z_mlp}, η = sort(Ψ)[⌊ρ·(#head units + #channels)⌋], remove
  what lies below η (a count, not a parameter budget; with scores ≈ 1 − ρ heads are rarely hit).

``standardize`` maps every layer's scores of one kind to (z − mean)/std first (FLAP); head means
use the spread of the channel scores they came from when given. The top ``min_heads`` head units
and ``min_channels`` channels of every layer (by score) are never candidates, so no layer loses
every head or channel. ``uniform`` turns the global counts into the same count per layer (each
layer drops its own lowest); with single-query-head units the count is spread evenly over the KV
groups so every layer keeps one GQA shape.

Budget under ``gqa=query``: a query head is costed at its q rows and o columns (2·D·Dh), but when
the kept heads of a layer are spread unevenly over its KV groups, the removal pads them back with
zero heads (HF attention needs every KV head to serve equally many query slots;
:func:`toolkit.models.structure.slot_layout`), so fewer parameters go than planned — on a 9/3-head toy
at 30% of the heads, none. The block engine warns with the real figure; ``gqa=groups`` (the
default) removes exactly the planned parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from toolkit.errors import ToolkitError
from toolkit.methods.block.base import BlockConfig, UnitScores
from toolkit.spec.compression import Unit

KINDS = ("heads", "channels")


@dataclass
class LayerCandidates:
    """One layer's offer: scores, parameters per head unit and per channel, KV group of each head unit."""

    scores: UnitScores
    head_cost: int
    channel_cost: int
    head_groups: Tensor | None = None  # (units,) KV group per unit when units are single query heads


@dataclass
class Allocation:
    """Kept units per layer (None: that kind is not a candidate) and the ranking behind them."""

    keep_heads: list[Tensor | None]
    keep_channels: list[Tensor | None]
    threshold: float
    ranked: Tensor  # every candidate's ranking score, ascending
    removed_cost: int
    total_cost: int
    ranked_kind: Tensor | None = None  # KINDS index (0 heads, 1 channels) of each entry of ``ranked``

    @property
    def achieved_ratio(self) -> float:
        """Removed parameters / parameters of all candidate units."""
        return self.removed_cost / self.total_cost if self.total_cost else 0.0


@dataclass
class _Pool:
    """All candidates flattened: ranking score, cost, layer, kind (0 heads, 1 channels), index, protected."""

    score: Tensor
    cost: Tensor
    layer: Tensor
    kind: Tensor
    index: Tensor
    protected: Tensor


def standardized(values: Tensor, reference: Tensor | None = None) -> Tensor:
    """(values − mean)/std with mean and std of ``reference`` (default: ``values``); std 0 → 1."""
    ref = (values if reference is None else reference).double()
    std = float(ref.std()) if ref.numel() > 1 else 0.0
    return ((values.double() - float(ref.mean())) / (std if std > 0 else 1.0)).float()


def _ranking_scores(layer: LayerCandidates, kind: str, cfg: BlockConfig) -> Tensor:
    raw = getattr(layer.scores, kind)
    assert raw is not None, f"{kind} were not scored"
    ranked = raw.float().cpu()
    if cfg.standardize:
        ref = layer.scores.head_channels if kind == "heads" else None
        ranked = standardized(ranked, None if ref is None else ref.float().cpu())
    if kind == "heads" and cfg.allocation == "paper_literal":
        ranked = ranked * (layer.head_cost / layer.channel_cost if layer.channel_cost else 1.0)
    return ranked


def _protected(raw: Tensor, keep_at_least: int) -> Tensor:
    protected = torch.zeros(len(raw), dtype=torch.bool)
    protected[torch.topk(raw.float().cpu(), min(keep_at_least, len(raw))).indices] = True
    return protected


def build_pool(layers: list[LayerCandidates], unit: Unit, cfg: BlockConfig) -> _Pool:
    """Flatten every candidate of the kinds ``unit`` asks for."""
    parts: dict[str, list[Tensor]] = {k: [] for k in ("score", "cost", "layer", "kind", "index", "protected")}
    kinds = [k for k, on in zip(KINDS, (unit.removes_heads, unit.removes_channels), strict=True) if on]
    for number, layer in enumerate(layers):
        for kind in kinds:
            raw = getattr(layer.scores, kind)
            count = len(raw)
            least = cfg.min_heads if kind == "heads" else cfg.min_channels
            parts["score"].append(_ranking_scores(layer, kind, cfg))
            cost = layer.head_cost if kind == "heads" else layer.channel_cost
            parts["cost"].append(torch.full((count,), cost, dtype=torch.float64))
            parts["layer"].append(torch.full((count,), number, dtype=torch.long))
            parts["kind"].append(torch.full((count,), KINDS.index(kind), dtype=torch.long))
            parts["index"].append(torch.arange(count))
            parts["protected"].append(_protected(raw, least))
    return _Pool(**{k: torch.cat(v) for k, v in parts.items()})


def _select(pool: _Pool, ratio: float, cfg: BlockConfig) -> Tensor:
    """Indices into the pool of the removed units (lowest ranking scores first)."""
    free = torch.nonzero(~pool.protected).flatten()
    order = free[torch.argsort(pool.score[free], stable=True)]
    total = float(pool.cost.sum())
    if cfg.allocation == "paper_literal":
        count = int(ratio * len(pool.score))
        if count > len(order):
            raise ToolkitError(_too_much(ratio, len(order) / len(pool.score), cfg, "of the units"))
        return order[:count]
    cumulative = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(pool.cost[order], 0)])
    target = ratio * total
    if target > float(cumulative[-1]) * (1 + 1e-9):
        raise ToolkitError(_too_much(ratio, float(cumulative[-1]) / total, cfg, "of the parameters"))
    if cfg.budget == "at_most":  # the longest prefix with Σcost ≤ ρ·total
        count = int((cumulative <= target * (1 + 1e-12)).sum()) - 1
    else:  # nearest: argmin_k |Σ_{j<k} cost_j − ρ·total|
        count = int(torch.argmin((cumulative - target).abs()))
    return order[:count]


def _too_much(ratio: float, most: float, cfg: BlockConfig, what: str) -> str:
    return (f"structured:{ratio * 100:g}% would remove every head or channel of some layer: keeping "
            f"min_heads={cfg.min_heads} and min_channels={cfg.min_channels} per layer, at most "
            f"{most * 100:.1f}% {what} can go; lower the ratio")


@dataclass(frozen=True)
class LayerOffer:
    """What one layer can give before any score exists: unit counts and the parameters each unit owns."""

    heads: int
    head_cost: int
    channels: int
    channel_cost: int


def check_budget(offers: list[LayerOffer], ratio: float, unit: Unit, cfg: BlockConfig) -> None:
    """Raise before any scoring when ρ cannot be met while every layer keeps min_heads / min_channels.

    The most that can go is Σ (n − min(least, n))·cost / Σ n·cost over the candidate kinds (units,
    not parameters, under ``allocation=paper_literal``): the same bound :func:`allocate` enforces.
    """
    total = free = 0.0
    for offer in offers:
        for on, count, cost, least in ((unit.removes_heads, offer.heads, offer.head_cost, cfg.min_heads),
                                       (unit.removes_channels, offer.channels, offer.channel_cost, cfg.min_channels)):
            if not on or count == 0 or cost == 0:
                continue
            weight = 1.0 if cfg.allocation == "paper_literal" else float(cost)
            total += count * weight
            free += (count - min(least, count)) * weight
    if total and ratio * total > free * (1 + 1e-9):
        what = "of the units" if cfg.allocation == "paper_literal" else "of the parameters"
        raise ToolkitError(_too_much(ratio, free / total, cfg, what))


def allocate(layers: list[LayerCandidates], ratio: float, unit: Unit, cfg: BlockConfig) -> Allocation:
    """The keep-masks of every layer for ratio ρ under ``cfg`` (allocation, standardize, uniform, minima).

    Raises :class:`ToolkitError` when ρ cannot be met without emptying a layer.
    """
    pool = build_pool(layers, unit, cfg)
    removed = _select(pool, ratio, cfg)
    keep: dict[str, list[Tensor | None]] = {kind: [None] * len(layers) for kind in KINDS}
    for number, layer in enumerate(layers):
        for kind_id, kind in enumerate(KINDS):
            if bool((pool.kind == kind_id).any()):
                keep[kind][number] = torch.ones(len(getattr(layer.scores, kind)), dtype=torch.bool)
    if cfg.uniform:
        _uniform(layers, pool, removed, keep, cfg, ratio)
    else:
        for i in removed.tolist():
            mask = keep[KINDS[int(pool.kind[i])]][int(pool.layer[i])]
            assert mask is not None
            mask[int(pool.index[i])] = False
    removed_cost = sum(int((~mask).sum()) * (layer.head_cost if kind == "heads" else layer.channel_cost)
                       for kind in KINDS for mask, layer in zip(keep[kind], layers, strict=True) if mask is not None)
    threshold = float(pool.score[removed].max()) if len(removed) else float("-inf")
    order = torch.argsort(pool.score, stable=True)
    return Allocation(keep["heads"], keep["channels"], threshold, pool.score[order],
                      removed_cost, int(pool.cost.sum()), pool.kind[order])


def _uniform(layers: list[LayerCandidates], pool: _Pool, removed: Tensor, keep: dict, cfg: BlockConfig,
             ratio: float) -> None:
    """Same removal count per layer: the global head count / layers, each layer's lowest first.

    Under ``param_weighted`` the channel count then fills the rest of the parameter budget. Counts
    are rounded to the nearest whole unit, or down under ``budget=at_most``; with ``channel_multiple`` the
    channels kept are rounded to a multiple of it (:func:`_whole_multiple`).
    """
    share: Callable[[float], int] = math.floor if cfg.budget == "at_most" else round
    per_layer: dict[str, int] = {}
    for kind_id, kind in enumerate(KINDS):
        if keep[kind][0] is not None:
            per_layer[kind] = share(int((pool.kind[removed] == kind_id).sum()) / len(layers))
    if cfg.allocation == "param_weighted" and len(per_layer) == 2:
        heads_cost = per_layer["heads"] * sum(layer.head_cost for layer in layers)
        left = ratio * float(pool.cost.sum()) - heads_cost
        per_layer["channels"] = max(share(left / sum(layer.channel_cost for layer in layers)), 0)
    channels = layers[0].scores.channels
    if "channels" in per_layer and channels is not None and cfg.channel_multiple > 1:
        per_layer["channels"] = _whole_multiple(channels.numel(), per_layer["channels"], cfg.channel_multiple,
                                                cfg.budget == "at_most")
    for kind, count in per_layer.items():
        least = cfg.min_heads if kind == "heads" else cfg.min_channels
        for number, layer in enumerate(layers):
            groups = layer.head_groups if kind == "heads" else None
            keep[kind][number] = _drop_lowest(getattr(layer.scores, kind).float().cpu(), count, least, groups,
                                              share)


def _whole_multiple(width: int, removed: int, multiple: int, at_most: bool) -> int:
    """The channels to remove so that the width kept is a whole multiple of ``multiple``.

    The multiple nearest the plan's kept width (under ``budget=at_most`` the one above: fewer removed, so the
    budget still holds), never less than one multiple, never more than the width.
    """
    kept = min(max((math.ceil if at_most else round)((width - removed) / multiple), 1) * multiple, width)
    return max(width - kept, 0)


def _drop_lowest(raw: Tensor, count: int, least: int, groups: Tensor | None,
                 share: Callable[[float], int]) -> Tensor:
    """Keep-mask dropping the ``count`` lowest; with ``groups``, ``share(count / groups)`` from every group."""
    keep = torch.ones(len(raw), dtype=torch.bool)
    if groups is None:
        count = max(min(count, len(raw) - least), 0)
        keep[torch.topk(raw, count, largest=False).indices] = False
        return keep
    num_groups = int(groups.max()) + 1
    size = len(raw) // num_groups
    per_group = max(min(share(count / num_groups), size - 1), 0)
    for g in range(num_groups):
        members = torch.nonzero(groups == g).flatten()
        keep[members[torch.topk(raw[members], per_group, largest=False).indices]] = False
    return keep
