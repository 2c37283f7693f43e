"""DSnoT mask refinement (Zhang et al., ICLR 2024): training-free prune-and-grow swaps per output row.

Notation (R15): W (out, in) the dense weight, W' the method's result (zeros where pruned), M the
keep-mask, x ∈ R^in a calibration input with per-column mean μ_j = E[x_j], variance
σ²_j = Var[x_j] and mean square ‖X_j‖²/N. The expected reconstruction error of output row i is

    e_i = E[(W x − W' x)_i] = Σ_j (W_ij − W'_ij) μ_j.

Each cycle makes at most one swap per row that still has a useful one:

1. **grow** the pruned weight j whose revival moves e_i toward 0 the most per unit of input
   variance: W_ij μ_j has the sign of e_i and the largest |W_ij μ_j| / σ_j^(2p) (p = ``variance_power``);
   it comes back with its dense value W_ij, and e_i drops by W_ij μ_j;
2. **prune** the kept weight k whose removal also moves e_i toward 0 (W'_ik μ_k of the opposite
   sign) with the smallest Wanda score |W'_ik| · ‖X_k‖; e_i rises by W'_ik μ_k (toward 0);
3. **keep** the swap only when e_i keeps its sign (|e_i| shrinks, never overshoots) and
   |e_i| > ``threshold``; a row whose swap is refused stops.

Under an n:m target the pruned weight k is taken from j's group of m, so the pattern stays n:m.
Each swap revives one weight and prunes one in the same row, so every row keeps its count of zeros
(the total sparsity is the method's). Weights the method changed (SparseGPT, FISTAPruner) stay as
it left them; a revived weight takes its dense value W_ij.

The objective reported before and after is ‖e‖₂ / ‖W μ‖₂, the expected error relative to the
expected dense output (the engine adds the measured ‖ΔW X‖/‖W X‖ of both masks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from toolkit.spec.refine import Refine

_VARIANCE_FLOOR = 1e-8  # σ² below this (a constant input column) counts as this, so the grow score stays finite


@dataclass(frozen=True)
class Refined:
    """A refined mask: the weight (out, in) float32 and keep-mask, swaps made, cycles run, objective before/after."""

    weight: Tensor
    keep_mask: Tensor
    swaps: int
    cycles: int
    expected_error_before: float
    expected_error_after: float


def expected_row_error(W: Tensor, W_new: Tensor, mean: Tensor) -> Tensor:
    """e_i = Σ_j (W_ij − W'_ij) μ_j, shape (out,)."""
    return (W - W_new) @ mean


def relative_expected_error(W: Tensor, W_new: Tensor, mean: Tensor) -> float:
    """‖e‖₂ / ‖W μ‖₂ (0 when the dense expected output is 0)."""
    base = float(torch.linalg.vector_norm(W @ mean))
    return float(torch.linalg.vector_norm(expected_row_error(W, W_new, mean))) / base if base > 0 else 0.0


def dsnot_refine(  # noqa: PLR0913 - the statistics DSnoT reads, each a named tensor
    W: Tensor, W_new: Tensor, keep: Tensor, mean: Tensor, mean_sq: Tensor, refine: Refine, *, group: int = 0,
) -> Refined:
    """Refine ``keep`` (out, in) bool of ``W_new`` by DSnoT swaps (module docstring); inputs are not mutated.

    ``mean`` is μ (in,), ``mean_sq`` ‖X_j‖²/N (in,); ``group`` is m of an n:m target (0: unstructured).
    The candidates of both steps are kept as four (out, in) tables updated at each swap, so a cycle
    costs four row reductions over the rows still swapping.
    """
    W, weight, keep = W.float(), W_new.float().clone(), keep.clone()
    mean = mean.float()
    variance = (mean_sq.float() - mean.square()).clamp_min(_VARIANCE_FLOOR)
    contribution = W * mean  # W_ij μ_j: what reviving j takes off e_i
    grow_score = contribution / variance.pow(refine.variance_power)
    norms = mean_sq.float().clamp_min(0).sqrt()
    tables = _Candidates.build(grow_score, weight * mean, weight.abs() * norms, keep)
    error = expected_row_error(W, weight, mean)
    before = relative_expected_error(W, weight, mean)
    rows = torch.arange(W.shape[0], device=W.device)
    wanda_dense = W.abs() * norms  # |W_ij|·‖X_j‖ of a revived weight
    swaps = cycles = 0
    while cycles < refine.cycles and rows.numel():
        cycles += 1
        e = error[rows]
        positive = e > 0
        j, grow_ok = tables.grow(rows, positive)
        k, prune_ok = tables.prune(rows, positive, j, group)
        after = e - contribution[rows, j] + weight[rows, k] * mean[k]
        accept = grow_ok & prune_ok & (torch.sign(after) == torch.sign(e)) & (e.abs() > refine.threshold)
        rows, j, k = rows[accept], j[accept], k[accept]
        keep[rows, j], weight[rows, j] = True, W[rows, j]
        keep[rows, k], weight[rows, k] = False, 0.0
        tables.swap(rows, j, k, grow_score, contribution, wanda_dense)
        error[rows] = after[accept]
        swaps += int(rows.numel())
    after_error = relative_expected_error(W, weight, mean)
    assert math.isfinite(after_error), "the expected error of a refined mask is finite for finite inputs"
    return Refined(weight, keep, swaps, cycles, before, after_error)


@dataclass
class _Candidates:
    """The four candidate tables of a refinement, (out, in) each; ±inf marks what a step may not pick.

    ``grow_hi`` / ``grow_lo``: the grow score of pruned weights (for rows with e_i > 0 the largest,
    for e_i < 0 the smallest); ``prune_pos`` / ``prune_neg``: the Wanda score of kept weights whose
    W'_ik μ_k is negative (for rows with e_i > 0) or positive (e_i < 0).
    """

    grow_hi: Tensor
    grow_lo: Tensor
    prune_pos: Tensor
    prune_neg: Tensor

    @classmethod
    def build(cls, grow_score: Tensor, contribution: Tensor, wanda: Tensor, keep: Tensor) -> _Candidates:
        """The tables of the method's mask ``keep``; ``contribution`` = W' μ and ``wanda`` = |W'| ‖X‖ of its weights."""
        return cls(grow_hi=grow_score.masked_fill(keep, -math.inf), grow_lo=grow_score.masked_fill(keep, math.inf),
                   prune_pos=wanda.masked_fill(~(keep & (contribution < 0)), math.inf),
                   prune_neg=wanda.masked_fill(~(keep & (contribution > 0)), math.inf))

    def grow(self, rows: Tensor, positive: Tensor) -> tuple[Tensor, Tensor]:
        """Per row of ``rows`` the pruned column to revive, and whether it moves e_i toward 0."""
        high, high_at = self.grow_hi[rows].max(dim=1)
        low, low_at = self.grow_lo[rows].min(dim=1)
        return torch.where(positive, high_at, low_at), torch.where(positive, high > 0, low < 0)

    def prune(self, rows: Tensor, positive: Tensor, grown: Tensor, group: int) -> tuple[Tensor, Tensor]:
        """Per row the kept column to prune (in ``grown``'s group of ``group`` under n:m), and whether one exists."""
        if group:
            columns = (grown // group * group).unsqueeze(1) + torch.arange(group, device=rows.device)  # (r, m)
            pos, pos_at = self.prune_pos[rows.unsqueeze(1), columns].min(dim=1)
            neg, neg_at = self.prune_neg[rows.unsqueeze(1), columns].min(dim=1)
            pos_at = columns.gather(1, pos_at.unsqueeze(1)).squeeze(1)
            neg_at = columns.gather(1, neg_at.unsqueeze(1)).squeeze(1)
        else:
            pos, pos_at = self.prune_pos[rows].min(dim=1)
            neg, neg_at = self.prune_neg[rows].min(dim=1)
        best = torch.where(positive, pos, neg)
        return torch.where(positive, pos_at, neg_at), torch.isfinite(best)

    def swap(
        self, rows: Tensor, grown: Tensor, pruned: Tensor, grow_score: Tensor, contribution: Tensor, wanda: Tensor,
    ) -> None:
        """Column ``grown`` of each row is kept now (with its dense weight), ``pruned`` is pruned."""
        self.grow_hi[rows, grown], self.grow_lo[rows, grown] = -math.inf, math.inf
        dense, score = contribution[rows, grown], wanda[rows, grown]
        self.prune_pos[rows, grown] = torch.where(dense < 0, score, math.inf)
        self.prune_neg[rows, grown] = torch.where(dense > 0, score, math.inf)
        self.prune_pos[rows, pruned], self.prune_neg[rows, pruned] = math.inf, math.inf
        self.grow_hi[rows, pruned] = grow_score[rows, pruned]
        self.grow_lo[rows, pruned] = grow_score[rows, pruned]
