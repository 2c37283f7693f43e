"""Keep-masks by k-th value (toolkit/methods/masks.py) against a full stable sort, with and without ties.

The selection finds the threshold with ``torch.kthvalue`` instead of sorting each comparison group. The
reference here sorts: a stable ascending argsort drops the ``count`` first entries, which takes tied
scores left to right — the masks' documented tie rule — so the two must agree bit for bit, ties or not,
and every comparison group must be exactly as sparse as asked.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from toolkit.methods import chunks, magnitude, wanda
from toolkit.methods.base import LinearStats, SolveContext
from toolkit.methods.masks import drop_lowest, keep_mask_from_scores, keep_nm
from toolkit.spec.targets import NM, Unstructured


def sorted_drop(scores: Tensor, count: int) -> Tensor:
    """The ``count`` lowest entries of each row (last dim) by a full stable sort: ties taken left to right."""
    order = torch.sort(scores, dim=-1, stable=True).indices[..., :count]
    return torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, order, True)


@pytest.mark.parametrize(("shape", "count"), [((7, 64), 32), ((16, 33), 1), ((5, 100), 99), ((3, 257), 128)])
def test_row_masks_equal_the_sort_reference_without_ties(shape: tuple[int, int], count: int) -> None:
    scores = torch.rand(shape, generator=torch.Generator().manual_seed(shape[1]))
    assert torch.equal(drop_lowest(scores, count), sorted_drop(scores, count))


@pytest.mark.parametrize("count", [1, 50, 300, 599])
def test_matrix_mask_equals_the_sort_reference_without_ties(count: int) -> None:
    scores = torch.randn(20, 30, generator=torch.Generator().manual_seed(count)).abs()
    got = keep_mask_from_scores(scores, Unstructured(count / scores.numel()), group="matrix")
    assert torch.equal(~got, sorted_drop(scores.flatten(), count).view_as(scores))


@pytest.mark.parametrize("levels", [1, 2, 3, 5])
@pytest.mark.parametrize("count", [1, 17, 32, 63])
def test_many_ties_keep_exact_counts_and_the_left_to_right_rule(levels: int, count: int) -> None:
    gen = torch.Generator().manual_seed(levels * 100 + count)
    scores = torch.randint(0, levels, (12, 64), generator=gen).float()  # every row is mostly ties
    drop = drop_lowest(scores, count)
    assert drop.sum(1).tolist() == [count] * 12
    assert torch.equal(drop, sorted_drop(scores, count))
    flat = drop_lowest(scores.flatten(), count * 5)
    assert int(flat.sum()) == count * 5
    assert torch.equal(flat, sorted_drop(scores.flatten(), count * 5))


def test_ties_only_on_some_rows_leave_the_other_rows_as_the_threshold_says() -> None:
    scores = torch.rand(6, 40, generator=torch.Generator().manual_seed(3))
    scores[2] = 1.0  # one row of equal scores, one with a block of ties across the threshold
    scores[4, 10:30] = 0.5
    drop = drop_lowest(scores, 20)
    assert drop.sum(1).tolist() == [20] * 6
    assert torch.equal(drop, sorted_drop(scores, 20))


def _stats(columns: int) -> LinearStats:
    return LinearStats(gram=torch.zeros(0, 0), count=1, col_sq=torch.ones(columns))


def test_wanda_and_magnitude_are_exactly_sparse_on_tied_weights() -> None:
    W = torch.randint(-2, 3, (24, 48), generator=torch.Generator().manual_seed(0)).float()  # five values: ties
    ctx = SolveContext(layer=0, name="x", quant=None)
    rows = wanda.prune(W.clone(), _stats(48), Unstructured(0.5), wanda.WandaConfig(), ctx)
    assert rows.keep_mask.sum(1).tolist() == [24] * 24
    assert torch.equal(~rows.keep_mask, sorted_drop(W.abs(), 24))
    whole = magnitude.prune(W.clone(), _stats(48), Unstructured(0.3), magnitude.MagnitudeConfig(), ctx)
    dropped = int(0.3 * W.numel())  # rounded down, as unstructured_count does
    assert int((~whole.keep_mask).sum()) == dropped
    assert torch.equal(~whole.keep_mask, sorted_drop(W.abs().flatten(), dropped).view_as(W))


def test_nm_masks_equal_the_sort_reference_without_ties() -> None:
    scores = torch.rand(8, 32, generator=torch.Generator().manual_seed(5))
    groups = scores.reshape(8, 8, 4)
    top = torch.sort(groups, dim=2, descending=True).indices[..., :2]
    expected = torch.zeros_like(groups, dtype=torch.bool).scatter_(2, top, True).reshape(8, 32)
    assert torch.equal(keep_nm(scores, NM(2, 4)), expected)


def test_row_chunks_give_the_unchunked_masks(monkeypatch: pytest.MonkeyPatch) -> None:
    scores = torch.randint(0, 4, (37, 50), generator=torch.Generator().manual_seed(9)).float()
    scores[::3] += torch.rand(13, 50, generator=torch.Generator().manual_seed(1))  # tie-free rows among tied ones
    whole = drop_lowest(scores, 21)
    monkeypatch.setattr(chunks, "ROW_CHUNK_ELEMENTS", 120)  # two rows a kthvalue call, the last chunk shorter
    assert torch.equal(drop_lowest(scores, 21), whole)
    assert torch.equal(whole, sorted_drop(scores, 21))


@pytest.mark.parametrize("tied", [False, True])
def test_a_large_flat_selection_through_the_sampled_band_equals_the_sort(tied: bool) -> None:
    gen = torch.Generator().manual_seed(4)
    scores = torch.randint(0, 7, (300_000,), generator=gen).float() if tied else torch.rand(300_000, generator=gen)
    for count in (1, 123_457, 299_999):
        assert torch.equal(drop_lowest(scores, count), sorted_drop(scores, count))
