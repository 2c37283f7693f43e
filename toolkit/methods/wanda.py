"""Wanda (Sun et al. 2023): score S_ij = |W_ij| · ‖X_j‖₂, prune the lowest, no weight update.

Comparison group: **per output row** (each row is exactly p sparse), as in the reference code;
n:m per group of m consecutive inputs of a row; structured removes the input columns with the
smallest mean score over the rows (the adaptation the Thanos paper compares against, §4.7).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from toolkit.methods.base import LinearStats, MethodSpec, PruneResult, SolveContext, Stat, structured_supported
from toolkit.methods.chunks import row_chunks
from toolkit.methods.masks import keep_mask_from_scores
from toolkit.spec.targets import Structured, Target


@dataclass(frozen=True)
class WandaConfig:
    """Wanda has no options: the metric and the per-row group are the paper's."""


def wanda_scores(W: Tensor, stats: LinearStats) -> Tensor:
    """S = |W| ⊙ ‖X_j‖ broadcast over rows; shape (out, in) (one (out, in) tensor allocated, not two)."""
    norms = torch.sqrt(stats.col_sq_norms).unsqueeze(0)
    scores = W.abs()
    return scores.mul_(norms) if torch.result_type(scores, norms) == scores.dtype else scores * norms


def prune(W: Tensor, stats: LinearStats, target: Target | None, cfg: WandaConfig, ctx: SolveContext) -> PruneResult:
    """Keep-mask from the Wanda score; kept weights unchanged."""
    assert target is not None, "a pruning method always gets a sparsity target (MethodSpec.check)"
    keep = keep_mask_by_rows(W, stats, target)
    return PruneResult(weight=W * keep, keep_mask=keep)


def keep_mask_by_rows(W: Tensor, stats: LinearStats, target: Target) -> Tensor:
    """The keep-mask of S = |W| ⊙ ‖X_j‖, scored a block of rows at a time where rows are independent.

    Per-row and n:m groups never span rows, so each chunk of rows (:func:`~toolkit.methods.chunks.row_chunks`)
    is scored and selected alone: the mask is exactly the whole matrix's, without an (out, in) float32 score beside W
    (180 MiB for a 7B MLP linear). A structured target compares columns over all rows: scored whole.
    """
    if isinstance(target, Structured):
        return keep_mask_from_scores(wanda_scores(W, stats), target, group="row")
    keep = torch.empty(W.shape, dtype=torch.bool, device=W.device)
    for chunk in row_chunks(W.shape[0], W.shape[1]):
        keep[chunk] = keep_mask_from_scores(wanda_scores(W[chunk], stats), target, group="row")
    return keep


SPEC = MethodSpec(
    name="wanda",
    fn=prune,
    config=WandaConfig,
    needs=frozenset({Stat.COL_NORMS}),
    targets=structured_supported(),
    summary="|W|·‖X_j‖ per output row, no update",
    reads_weight_only=True,
)
