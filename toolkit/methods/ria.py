"""RIA (Zhang et al., ICLR 2024, "Plug-and-Play"): relative importance times activations, no update.

For one linear with weight W (out, in) and the mean input column norms ‖X_j‖²/N (``Stat.COL_NORMS``):

    RI_ij = |W_ij| / Σ_k |W_ik|  +  |W_ij| / Σ_k |W_kj|      (row share + column share of |W_ij|)
    S_ij  = RI_ij · (‖X_j‖₂)^a                              (a = ``power``, 0.5 in the paper)

A weight counts by its share of its output row's and of its input column's total magnitude, so
channels whose weights are all large (outlier columns) are not pruned wholesale. A row or column
of zeros has a zero share (no division by zero). The kept weights are left as they are.

Comparison group: **per output row** (``group="row"``, each row exactly p sparse, the paper's
default) or the whole matrix (``group="matrix"``); n:m per group of m consecutive inputs of a row.
The mean norm instead of the sum scales every score of a linear by one factor: the mask is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from toolkit.methods.base import LinearStats, MethodSpec, PruneResult, SolveContext, Stat, option
from toolkit.methods.masks import keep_mask_from_scores
from toolkit.spec.targets import NM, Target, Unstructured

GROUPS = ("row", "matrix")


@dataclass(frozen=True)
class RIAConfig:
    """RIA options (defaults from the paper)."""

    power: float = option(0.5, "exponent a of the input norm ‖X_j‖₂^a in the score (0 = weights only)")
    group: str = option("row", "unstructured comparison group: row (each output row p sparse) or matrix",
                        choices=GROUPS)

    def __post_init__(self) -> None:
        if not 0 <= self.power <= 4:
            raise ValueError("power must be in [0, 4]")


def _share(A: Tensor, dim: int) -> Tensor:
    """A / Σ_dim A, zero where the sum is zero (a dead row or column has no share)."""
    total = A.sum(dim=dim, keepdim=True)
    return torch.where(total > 0, A / total.clamp_min(torch.finfo(A.dtype).tiny), torch.zeros_like(A))


def ria_scores(W: Tensor, stats: LinearStats, power: float = 0.5) -> Tensor:
    """S = (|W|/Σ_row|W| + |W|/Σ_col|W|) ⊙ (‖X_j‖₂)^a broadcast over rows; shape (out, in), float32."""
    A = W.abs()  # (out, in)
    relative = _share(A, dim=1) + _share(A, dim=0)  # row share + column share
    norms = stats.col_sq_norms.clamp_min(0.0).pow(power / 2)  # (‖X_j‖²/N)^(a/2) = (‖X_j‖/√N)^a, (in,)
    return relative * norms.unsqueeze(0)


def prune(W: Tensor, stats: LinearStats, target: Target | None, cfg: RIAConfig, ctx: SolveContext) -> PruneResult:
    """Keep-mask from the RIA score in the configured comparison group; kept weights unchanged."""
    assert target is not None, "a pruning method always gets a sparsity target (MethodSpec.check)"
    keep = keep_mask_from_scores(ria_scores(W, stats, cfg.power), target, group=cfg.group)
    return PruneResult(weight=W * keep, keep_mask=keep)


SPEC = MethodSpec(
    name="ria",
    fn=prune,
    config=RIAConfig,
    needs=frozenset({Stat.COL_NORMS}),
    targets=(Unstructured, NM),
    summary="relative importance (row + column share of |W|)·‖X_j‖^0.5 per output row, no update",
    reads_weight_only=True,
)
