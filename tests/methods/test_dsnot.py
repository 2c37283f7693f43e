"""DSnoT swaps: a hand-checked case, row counts and n:m kept, the expected error never grows, inputs untouched."""

from __future__ import annotations

import pytest
import torch

from toolkit.methods.dsnot import dsnot_refine, expected_row_error
from toolkit.spec.refine import Refine


def test_one_row_by_hand() -> None:
    # W = [4, 1, -2, 3], μ = [1, 1, 1, 1], var 1 everywhere; keep {0, 3} → e = 1 + (-2) = -1.
    # Grow: the pruned weight with W μ of the sign of e (-) → column 2 (-2); e → -1 - (-2) = +1: flips sign, refused.
    W = torch.tensor([[4.0, 1.0, -2.0, 3.0]])
    keep = torch.tensor([[True, False, False, True]])
    mean = torch.ones(4)
    refined = dsnot_refine(W, W * keep, keep, mean, mean.square() + 1, Refine(cycles=5))
    assert refined.swaps == 0 and torch.equal(refined.keep_mask, keep)
    # keep {1, 2}: e = 4 + 3 = 7 > 0; grow the largest positive W μ among {0, 3} → 0 (4); prune the kept weight with
    # W μ < 0 (opposite to e) of least |W|·‖X‖ → 2; e → 7 - 4 + (-2) = 1, same sign: accepted.
    # Then grow 3 (e → -2): refused.
    keep = torch.tensor([[False, True, True, False]])
    refined = dsnot_refine(W, W * keep, keep, mean, mean.square() + 1, Refine(cycles=5))
    assert refined.swaps == 1
    assert refined.keep_mask.tolist() == [[True, True, False, False]]
    assert refined.weight.tolist() == [[4.0, 1.0, 0.0, 0.0]]
    assert float(expected_row_error(W, refined.weight, mean)) == pytest.approx(1.0)


def _random(rows: int = 16, cols: int = 64, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    W = torch.randn(rows, cols, generator=gen)
    X = torch.randn(512, cols, generator=gen) * torch.rand(cols, generator=gen) + torch.randn(cols, generator=gen)
    return W, X.mean(0), X.square().mean(0)


def test_rows_keep_their_counts_and_the_error_shrinks_monotonically() -> None:
    W, mean, mean_sq = _random()
    score = W.abs() * mean_sq.sqrt()
    keep = score >= score.quantile(0.6, dim=1, keepdim=True)
    W_in, keep_in = W.clone(), keep.clone()
    refined = dsnot_refine(W, W * keep, keep, mean, mean_sq, Refine(cycles=30))
    assert torch.equal(W, W_in) and torch.equal(keep, keep_in)  # inputs not mutated
    assert torch.equal(refined.keep_mask.sum(1), keep.sum(1))
    assert refined.swaps > 0
    assert refined.expected_error_after < refined.expected_error_before
    before = expected_row_error(W, W * keep, mean).abs()
    after = expected_row_error(W, refined.weight, mean).abs()
    assert bool((after <= before + 1e-5).all())
    assert torch.equal(refined.weight == 0, ~refined.keep_mask | (W == 0))


def test_nm_groups_stay_valid() -> None:
    W, mean, mean_sq = _random(rows=8, cols=32, seed=1)
    score = (W.abs() * mean_sq.sqrt()).reshape(8, 8, 4)
    keep = torch.zeros_like(score, dtype=torch.bool).scatter_(2, score.topk(2, dim=2).indices, True).reshape(8, 32)
    refined = dsnot_refine(W, W * keep, keep, mean, mean_sq, Refine(cycles=20), group=4)
    assert refined.swaps > 0
    assert bool((refined.keep_mask.reshape(8, 8, 4).sum(2) == 2).all())


def test_revived_weights_take_the_dense_value_and_updated_weights_stay() -> None:
    W, mean, mean_sq = _random(seed=2)
    keep = torch.rand(W.shape, generator=torch.Generator().manual_seed(3)) > 0.5
    updated = (W + 0.1) * keep  # a method that changed the kept weights (SparseGPT-like)
    refined = dsnot_refine(W, updated, keep, mean, mean_sq, Refine(cycles=10))
    revived = refined.keep_mask & ~keep
    still = refined.keep_mask & keep
    assert bool(revived.any())
    assert torch.equal(refined.weight[revived], W[revived])
    assert torch.equal(refined.weight[still], updated[still])
