"""The contract of block-scope methods (heads and channels removed; shapes change; CONTRIBUTING.md R2).

A block method is a pure scorer: for one decoder layer it receives the float32 weights of the
structural modules (:class:`BlockTensors`, HF layout (out, in)), the statistics of the inputs of
o_proj and down_proj (:class:`BlockStats`), how query heads group into head units
(:class:`HeadLayout`) and the run's ratio ρ, and returns :class:`UnitScores` (higher = keep). The
block engine (:mod:`toolkit.engine.block.driver`) captures the statistics, ranks every unit of every layer
at once (:mod:`toolkit.engine.block.plan`), compensates and removes (:mod:`toolkit.engine.block.shrink`).

Statistics per input (x ∈ R^in of o_proj or down_proj, N calibration tokens):
``gram`` G = Σ x xᵀ / N (in, in), ``mean`` μ = Σ x / N (in,), ``count`` N.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from toolkit.errors import ToolkitError
from toolkit.methods.base import option

ALLOCATIONS = ("param_weighted", "paper_literal")
GQA_MODES = ("groups", "query")
BUDGETS = ("nearest", "at_most")
COMPENSATIONS = ("least_squares", "least_squares_bias", "bias", "none")
GRAM_SOURCES = ("dense", "sequential")


@dataclass(frozen=True)
class BlockConfig:
    """Options every block-scope method shares: allocation, GQA units, compensation, layout."""

    allocation: str = option("param_weighted", "global ranking: param_weighted (remove the lowest-scored units "
                             "until ρ of the parameters are gone; a head costs its real parameters) or paper_literal "
                             "(Eq. 8 as printed: head scores × α = 4·Dh/3, the lowest ρ·#units removed)",
                             ALLOCATIONS)
    budget: str = option("nearest", "how the global cut meets ρ (param_weighted): nearest (the ranking prefix whose "
                         "parameters are closest to ρ; may exceed it by up to half a unit) or at_most (the longest "
                         "prefix that does not exceed ρ, and uniform per-layer counts rounded down, so methods "
                         "compare at no more than equal budgets)", BUDGETS)
    standardize: bool = option(False, "standardize scores per layer and kind (z − mean)/std before the global "
                               "ranking (FLAP does; the Numerical Pruning paper does not)")
    gqa: str = option("groups", "GQA units: groups (a KV head with all its query heads) or query (single query "
                      "heads; a KV head goes when its last query head goes; uneven groups keep zero heads, so "
                      "fewer parameters go than planned: a warning says how many)", GQA_MODES)
    uniform: bool = option(False, "every layer keeps the same head and channel counts (a standard HF config "
                           "loads the result); default: counts differ per layer")
    channel_multiple: int = option(1, "with uniform=true: the MLP channels every layer keeps rounded to a multiple "
                                   "of this (32: GGUF's 4-bit blocks, docs/serving.md; 64 or 128 for GPU kernels)")
    min_heads: int = option(1, "head units every layer keeps at least")
    min_channels: int = option(1, "MLP channels every layer keeps at least")
    compensate: str = option("least_squares", "update of o_proj/down_proj for the removed inputs: least_squares "
                             "(Thm 3, closed form), least_squares_bias (Thm 3 refitting the bias too), bias (FLAP: "
                             "mean of removed inputs into the bias) or none",
                             COMPENSATIONS)
    damp_frac: float = option(0.01, "compensation damping γ as a fraction of mean(diag XᵀX) (Remark 5)")
    grams: str = option("dense", "statistics for compensation: dense (the scoring pass's dense-model Grams) or "
                        "sequential (re-gathered on the already pruned layers before)", GRAM_SOURCES)
    remove: bool = option(True, "physically remove the units (smaller Linears); False zeroes them and keeps "
                          "the shapes (for comparisons)")

    def __post_init__(self) -> None:
        if self.min_heads < 1 or self.min_channels < 1:
            raise ToolkitError("min_heads and min_channels must be ≥ 1: a layer never loses every head or channel")
        if self.channel_multiple < 1:
            raise ToolkitError(f"channel_multiple must be ≥ 1, got {self.channel_multiple}")
        if self.channel_multiple > 1 and not self.uniform:
            raise ToolkitError("channel_multiple rounds the one channel count every layer keeps: add --set "
                               "uniform=true")
        if self.damp_frac < 0:
            raise ToolkitError(f"damp_frac must be ≥ 0, got {self.damp_frac}")


@dataclass
class BlockTensors:
    """Float32 weights (out, in) and biases of one layer's structural modules (None: absent)."""

    weights: dict[str, Tensor]
    biases: dict[str, Tensor | None]

    def __getitem__(self, role: str) -> Tensor:
        return self.weights[role]


@dataclass
class InputStats:
    """Statistics of one linear's input: mean Gram (in, in), mean (in,), token count."""

    gram: Tensor
    mean: Tensor
    count: int

    def to(self, device: torch.device | str) -> InputStats:
        """The same statistics on ``device``."""
        return InputStats(self.gram.to(device), self.mean.to(device), self.count)


@dataclass
class BlockStats:
    """Input statistics of o_proj (``attn``) and down_proj (``mlp``); None when not gathered."""

    attn: InputStats | None
    mlp: InputStats | None


@dataclass(frozen=True)
class HeadLayout:
    """Query heads → head units: ``unit_of_head`` (H,) long, Dh, n_rep, number of units.

    ``owns_kv``: removing a unit removes its KV head too (``gqa=groups``, or no GQA at all).
    """

    unit_of_head: Tensor
    head_dim: int
    n_rep: int
    num_units: int
    owns_kv: bool

    def unit_of_channel(self) -> Tensor:
        """Unit index of every o_proj input channel (H·Dh,)."""
        return self.unit_of_head.repeat_interleave(self.head_dim)

    def kv_of_unit(self) -> Tensor:
        """KV head of every unit (units never straddle KV groups)."""
        first = torch.zeros(self.num_units, dtype=torch.long).scatter_reduce(
            0, self.unit_of_head, torch.arange(len(self.unit_of_head)), "amin", include_self=False)
        return first // self.n_rep


@dataclass
class UnitScores:
    """Scores of one layer's units, higher = keep. ``heads`` (units,), ``channels`` (I,).

    ``head_channels`` (H·Dh,) optionally holds the channel scores the head scores were averaged
    from: per-layer standardization then uses their mean and spread (FLAP standardizes channels
    before averaging them into heads).
    """

    heads: Tensor | None
    channels: Tensor | None
    head_channels: Tensor | None = None


def unit_means(channel_scores: Tensor, layout: HeadLayout) -> Tensor:
    """Mean of the o_proj channel scores (H·Dh,) over each head unit (Eq. 8's head score)."""
    units = layout.unit_of_channel().to(channel_scores.device)
    sums = torch.zeros(layout.num_units, dtype=channel_scores.dtype, device=channel_scores.device)
    sums.index_add_(0, units, channel_scores)
    counts = torch.bincount(units, minlength=layout.num_units).to(channel_scores.dtype)
    return sums / counts


def column_unit_scores(
    tensors: BlockTensors, stats: BlockStats, layout: HeadLayout,
    column_score: Callable[[str, Tensor, InputStats], Tensor],
) -> UnitScores:
    """Unit scores from per-input-column scores of o_proj and down_proj.

    ``column_score(role, W, stats)`` scores every input column of the linear ``role`` ("o" or
    "down"); o_proj's column scores are averaged into head units (:func:`unit_means`), down_proj's
    are the MLP channel scores. A kind without statistics is not scored (None).
    """
    heads = head_channels = channels = None
    if stats.attn is not None:
        head_channels = column_score("o", tensors["o"], stats.attn)
        heads = unit_means(head_channels, layout)
    if stats.mlp is not None:
        channels = column_score("down", tensors["down"], stats.mlp)
    return UnitScores(heads=heads, channels=channels, head_channels=head_channels)


ScoreFn = Callable[[BlockTensors, BlockStats, HeadLayout, float, Any, Any], UnitScores]


def not_a_linear_solver(name: str) -> Callable[..., Any]:
    """Guard for calls that treat a block scorer as a linear solver (W, LinearStats, ...)."""

    def check(tensors: Any) -> None:
        if not isinstance(tensors, BlockTensors):
            raise ToolkitError(f"{name} is a block-scope method (heads/channels): run it through "
                               "toolkit.engine.block.driver.prune_blocks, not the per-linear engine")

    return check
