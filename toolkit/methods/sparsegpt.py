"""SparseGPT (Frantar & Alistarh 2023): OBS sweep over columns with lazy block updates.

With H = XXᵀ + δI and U the upper Cholesky factor of H⁻¹ (so [H_F⁻¹]_qq = U_qq² for the columns
F still to the right), columns are visited left to right in blocks of ``block_size``:
- mask: inside a block, drop the weights with the smallest OBS score W_kq² / U_qq² (adaptive
  mask selection; each block carries its share of the target, so the comparison group is the
  column block); n:m chooses n of every m columns on the current weights; structured drops
  whole columns by the column mean of the score;
- update (eq. OBS): err = (w_q − ŵ_q)/U_qq,  W_{:,q:} ← W_{:,q:} − err ⊗ U_{q,q:};
  after the block, W_{:,right} −= Err · U_{block,right} (lazy batch update).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from toolkit.methods.base import (
    SOLVER_DTYPE,
    LinearStats,
    MethodSpec,
    PruneResult,
    SolveContext,
    Stat,
    damped_cholesky_inverse,
    option,
    structured_supported,
    zero_dead_inputs,
)
from toolkit.methods.masks import keep_columns, keep_nm, keep_topk_global
from toolkit.spec.targets import NM, Structured, Target, Unstructured


@dataclass(frozen=True)
class SparseGPTConfig:
    """SparseGPT options (defaults from the reference code)."""

    block_size: int = option(128, "columns per lazy-update block (mask chosen per block)")
    damp_frac: float = option(0.01, "Hessian damping as a fraction of mean(diag H); escalates ×10 on failure")

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError("block_size must be ≥ 1")
        if not 0 <= self.damp_frac < 1e3:
            raise ValueError("damp_frac must be in [0, 1000)")


def _share(fraction: float, total: int, start: int, stop: int) -> int:
    """Items to remove in [start, stop) so that the running total is floor(fraction · position)."""
    return int(fraction * stop * total) - int(fraction * start * total)


def _block_mask(W1: Tensor, d: Tensor, target: Target, i1: int, i2: int) -> Tensor:
    """Keep-mask (out, i2-i1) of one block for unstructured/structured targets (n:m is per m)."""
    scores = W1**2 / (d**2).unsqueeze(0)  # (out, B)
    if isinstance(target, Structured):
        return keep_columns(scores.mean(0), W1.shape[0], _share(target.sparsity, 1, i1, i2))
    assert isinstance(target, Unstructured)
    return keep_topk_global(scores, _share(target.sparsity, W1.shape[0], i1, i2))


def prune(W: Tensor, stats: LinearStats, target: Target | None, cfg: SparseGPTConfig, ctx: SolveContext) -> PruneResult:
    """Run the SparseGPT sweep on W (out, in); returns the updated weight and its keep-mask."""
    assert target is not None, "a pruning method always gets a sparsity target (MethodSpec.check)"
    W, H = zero_dead_inputs(W.to(SOLVER_DTYPE).clone(), stats.gram.to(SOLVER_DTYPE))
    U, damping = damped_cholesky_inverse(H, cfg.damp_frac, ctx)
    _, cols = W.shape
    block = cfg.block_size
    if isinstance(target, NM):
        block = max(target.m, block // target.m * target.m)
    keep = torch.ones_like(W, dtype=torch.bool)
    for i1 in range(0, cols, block):
        ctx.check_cancel()
        i2 = min(i1 + block, cols)
        U1 = U[i1:i2, i1:i2]
        d = torch.diagonal(U1)
        Wt = W[:, i1:i2].t().contiguous()  # (B, out): column q of the block is the contiguous row Wt[q]
        Errt = torch.empty_like(Wt)
        if isinstance(target, NM):
            keep1t = torch.ones_like(Wt, dtype=torch.bool)
        else:
            keep1t = _block_mask(Wt.t(), d, target, i1, i2).t().contiguous()
        drop_t = (~keep1t).to(Wt.dtype) / d.unsqueeze(1)  # (1 − keep)/U_qq, so err = w · drop
        for i in range(i2 - i1):
            if isinstance(target, NM) and i % target.m == 0:
                scores = Wt[i : i + target.m].t() ** 2 / (d[i : i + target.m] ** 2).unsqueeze(0)
                keep1t[i : i + target.m] = keep_nm(scores, target).t()
                drop_t[i : i + target.m] = (~keep1t[i : i + target.m]).to(Wt.dtype) / d[i : i + target.m, None]
            err = torch.mul(Wt[i], drop_t[i], out=Errt[i])  # (w − ŵ)/U_qq with ŵ = w·keep
            Wt[i:].addr_(U1[i, i:], err, alpha=-1.0)  # W_{:,q:} −= err ⊗ U_{q,q:}
        W[:, i1:i2] = (Wt * keep1t).t()
        keep[:, i1:i2] = keep1t.t()
        W[:, i2:].addmm_(Errt.t(), U[i1:i2, i2:], alpha=-1.0)  # lazy update in place, no (out, rest) temporary
    return PruneResult(weight=W, keep_mask=keep, damping=damping)


SPEC = MethodSpec(
    name="sparsegpt",
    fn=prune,
    config=SparseGPTConfig,
    needs=frozenset({Stat.GRAM}),
    targets=structured_supported(),
    summary="OBS updates with lazy column blocks (mask per block)",
)
