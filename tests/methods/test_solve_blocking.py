"""The cache-blocked solver paths against unblocked references (SparseGPT, Thanos) and exact selection.

SparseGPT's lazy block update and Thanos's in-place update change where the sums happen, not what they
sum: both must equal a plain column-by-column (or delta-by-delta) reference within float32 rounding.
The threshold search must return exactly ``torch.kthvalue``'s value on inputs large enough to take the
sampled path, including the row-structured scores a strided sample would miss.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from tests.helpers.stats import correlated_stats
from toolkit.methods import sparsegpt, thanos
from toolkit.methods.base import SolveContext, damped_cholesky_inverse, zero_dead_inputs
from toolkit.methods.masks import keep_topk_global
from toolkit.methods.thanos_update import (
    SELECT_SAMPLE,
    SelectScratch,
    kth_select,
    kth_smallest,
    multiweight_factor,
    multiweight_update,
    residual_block_mask,
)
from toolkit.spec.targets import Unstructured


def _sparsegpt_unblocked(W: Tensor, H: Tensor, sparsity: float, block: int) -> tuple[Tensor, Tensor]:
    """SparseGPT with every column's OBS update applied at once to all columns to its right (float64).

    The mask of each block is chosen the same way (same scores, same per-block share); only the lazy
    batching of the updates is gone.
    """
    W, H = zero_dead_inputs(W.clone(), H)
    U, _ = damped_cholesky_inverse(H, 0.01, SolveContext())
    W, U = W.double(), U.double()
    rows, cols = W.shape
    keep = torch.ones_like(W, dtype=torch.bool)
    for i1 in range(0, cols, block):
        i2 = min(i1 + block, cols)
        d = torch.diagonal(U)[i1:i2]
        share = int(sparsity * i2 * rows) - int(sparsity * i1 * rows)
        keep[:, i1:i2] = keep_topk_global((W[:, i1:i2] ** 2 / d**2).float(), share)
        for q in range(i1, i2):
            err = W[:, q] * (~keep[:, q]).double() / U[q, q]
            W[:, q:] -= torch.outer(err, U[q, q:])
        W[:, i1:i2] *= keep[:, i1:i2]
    return W, keep


@pytest.mark.parametrize("block", [8, 32])
def test_sparsegpt_lazy_blocks_equal_the_unblocked_sweep(block: int) -> None:
    _, stats = correlated_stats(96, 2048, seed=3)
    W = torch.randn(40, 96, generator=torch.Generator().manual_seed(4))
    result = sparsegpt.prune(W, stats, Unstructured(0.5), sparsegpt.SparseGPTConfig(block_size=block),
                             SolveContext())
    reference, keep = _sparsegpt_unblocked(W, stats.gram, 0.5, block)
    assert torch.equal(result.keep_mask, keep)
    scale = float(reference.abs().max())
    assert torch.allclose(result.weight.double(), reference, rtol=1e-4, atol=1e-5 * scale)


def test_thanos_in_place_update_equals_the_delta() -> None:
    _, stats = correlated_stats(64, 2048, seed=5)
    W = torch.randn(48, 64, generator=torch.Generator().manual_seed(6))
    U, _ = damped_cholesky_inverse(stats.gram, 0.01, SolveContext())
    prune = torch.rand(48, 16, generator=torch.Generator().manual_seed(7)) < 0.5
    delta, loss = multiweight_update(W[:, :16], U[:16, :16], U[:16], prune)
    factor, loss2 = multiweight_factor(W[:, :16], U[:16, :16], prune)
    blocked = W.clone().addmm_(factor, U[:16], alpha=-1.0)
    assert torch.equal(loss, loss2)
    assert torch.allclose(blocked, W + delta, rtol=1e-6, atol=1e-6 * float(W.abs().max()))
    assert float(blocked[:, :16][prune].abs().max()) < 1e-4  # the removed weights land on zero


def test_thanos_sweep_equals_the_delta_sweep() -> None:
    """thanos.prune (in-place updates) against the same sweep adding each block's delta."""
    _, stats = correlated_stats(64, 2048, seed=8)
    W = torch.randn(32, 64, generator=torch.Generator().manual_seed(9))
    result = thanos.prune(W, stats, Unstructured(0.5), thanos.ThanosConfig(block_size=16), SolveContext())
    U, _ = damped_cholesky_inverse(stats.gram, 0.01, SolveContext())
    ref, norms, remaining = W.clone(), torch.sqrt(torch.diagonal(stats.gram)), int(0.5 * W.numel())
    for j1 in range(0, 64, 16):
        prune = residual_block_mask(ref[:, j1:].abs() * norms[j1:], remaining, 16)
        delta, _ = multiweight_update(ref[:, j1 : j1 + 16], U[j1 : j1 + 16, j1 : j1 + 16], U[j1 : j1 + 16, j1:], prune)
        ref[:, j1:] += delta
        ref[:, j1 : j1 + 16].masked_fill_(prune, 0.0)
        remaining -= int(prune.sum())
    assert torch.equal(result.weight != 0, ref != 0)
    assert torch.allclose(result.weight, ref, rtol=1e-5, atol=1e-6 * float(W.abs().max()))


def test_kth_smallest_is_exact_on_row_structured_scores() -> None:
    """Scores whose scale depends on the column only: a stride dividing the width would sample 2 columns."""
    rows, cols = 512, 1024  # 8 × SELECT_SAMPLE < rows·cols, so the sampled bracket runs
    assert rows * cols > 8 * SELECT_SAMPLE
    gen = torch.Generator().manual_seed(10)
    column_scale = torch.exp(3.0 * torch.randn(cols, generator=gen))
    scores = (torch.rand(rows, cols, generator=gen) * column_scale).flatten()
    for k in (1, 1000, rows * cols // 2, rows * cols - 7, rows * cols):
        assert torch.equal(kth_smallest(scores, k), torch.kthvalue(scores, k).values)


def test_residual_block_mask_counts_exactly_with_and_without_surplus_ties() -> None:
    gen = torch.Generator().manual_seed(11)
    metric = torch.rand(600, 512, generator=gen)
    count = 150_000
    mask = residual_block_mask(metric, count, 64)
    threshold = torch.kthvalue(metric.flatten(), count).values
    assert torch.equal(mask, metric[:, :64] <= threshold)
    tied = torch.floor(metric * 8) / 8  # few distinct values: the threshold has far more ties than needed
    mask = residual_block_mask(tied, count, 512)
    assert int(mask.sum()) == count
    threshold = torch.kthvalue(tied.flatten(), count).values
    assert torch.all(tied[mask] <= threshold) and torch.all(tied[~mask] >= threshold)
    flat_ties = (tied == threshold).flatten() & mask.flatten()
    last = int(torch.nonzero(flat_ties).max())
    assert bool(((tied == threshold).flatten()[:last] <= mask.flatten()[:last]).all())  # taken in row-major order


@pytest.mark.parametrize("step", [None, 1 / 8])
def test_kth_select_counts_and_reused_scratch_match_a_fresh_pass(step: float | None) -> None:
    """The counts below / at the k-th value come from the band, and a reused (larger) scratch changes nothing."""
    gen = torch.Generator().manual_seed(12)
    metric = torch.rand(600, 512, generator=gen) * torch.exp(torch.randn(512, generator=gen))
    if step is not None:
        metric = torch.floor(metric / step) * step  # surplus ties at every threshold
    metric[:3] = torch.inf  # excluded rows (outliers) never count
    scratch = SelectScratch.of_size(metric.numel() + 1000, metric.device)
    for count in (1, 4096, metric.numel() // 2, metric.numel() - 3 * 512 - 1):
        chosen = kth_select(metric.flatten(), count, scratch)
        assert torch.equal(chosen.value, torch.kthvalue(metric.flatten(), count).values)
        assert chosen.n_lt == int((metric < chosen.value).sum())
        assert chosen.n_le == int((metric <= chosen.value).sum())
        assert torch.equal(residual_block_mask(metric, count, 64, scratch), residual_block_mask(metric, count, 64))
        assert int(residual_block_mask(metric, count, 512, scratch).sum()) == count
