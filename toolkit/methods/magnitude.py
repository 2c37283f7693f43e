"""Magnitude pruning (Han et al. 2015): drop the smallest |W_ij|, no calibration, no update.

Comparison group: the whole matrix of one linear (a per-layer threshold, as the reference code);
n:m per group of m consecutive inputs of a row; structured by the column mean of |W|.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from toolkit.methods.base import LinearStats, MethodSpec, PruneResult, SolveContext, structured_supported
from toolkit.methods.masks import keep_mask_from_scores
from toolkit.spec.targets import Target


@dataclass(frozen=True)
class MagnitudeConfig:
    """Magnitude has no options."""


def prune(W: Tensor, stats: LinearStats, target: Target | None, cfg: MagnitudeConfig, ctx: SolveContext) -> PruneResult:
    """Keep-mask from |W| (out, in); the kept weights are unchanged."""
    assert target is not None, "a pruning method always gets a sparsity target (MethodSpec.check)"
    keep = keep_mask_from_scores(W.abs(), target, group="matrix")
    return PruneResult(weight=W * keep, keep_mask=keep)


SPEC = MethodSpec(
    name="magnitude",
    fn=prune,
    config=MagnitudeConfig,
    needs=frozenset(),
    targets=structured_supported(),
    summary="smallest |W| per linear; data-free baseline",
    reads_weight_only=True,
    data_free=True,
)
