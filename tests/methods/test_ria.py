"""RIA: the score by hand, dead rows and columns, comparison groups and properties over its targets."""

from __future__ import annotations

import math

import pytest
import torch

from tests.helpers.stats import correlated_stats
from toolkit.errors import ToolkitError
from toolkit.methods import get_method
from toolkit.methods.base import LinearStats, SolveContext
from toolkit.methods.masks import nm_violations
from toolkit.methods.ria import ria_scores
from toolkit.run.config import RunConfig
from toolkit.spec.targets import NM, Structured, Unstructured, unstructured_count


def _solve(W: torch.Tensor, stats: LinearStats, target: object, **options: object):
    spec = get_method("ria")
    return spec.fn(W, stats, target, spec.make_config(options), SolveContext())


def test_ria_score_by_hand() -> None:
    W = torch.tensor([[1.0, -2.0, 0.0, 4.0], [3.0, 0.0, -1.0, 1.0]])
    stats = LinearStats(torch.diag(torch.tensor([1.0, 16.0, 4.0, 1.0])), 10)  # ‖X_j‖ = 1, 4, 2, 1 → ^0.5: 1, 2, √2, 1
    # row sums of |W|: 7, 5; column sums: 4, 2, 1, 5
    expected = torch.tensor([
        [(1 / 7 + 1 / 4) * 1, (2 / 7 + 2 / 2) * 2, 0.0, (4 / 7 + 4 / 5) * 1],
        [(3 / 5 + 3 / 4) * 1, 0.0, (1 / 5 + 1 / 1) * math.sqrt(2), (1 / 5 + 1 / 5) * 1],
    ])
    torch.testing.assert_close(ria_scores(W, stats), expected)
    result = _solve(W, stats, Unstructured(0.5))
    assert result.keep_mask.tolist() == [[False, True, False, True], [True, False, True, False]]
    assert torch.equal(result.weight, W * result.keep_mask)


def test_the_column_share_keeps_a_weight_that_magnitude_per_row_drops() -> None:
    # column 0 is large in every row; the relative importance favours column 1 in row 0, where it is the
    # largest weight of its column, although |W_00| > |W_01|
    W = torch.tensor([[5.0, 4.0], [5.0, 0.1], [5.0, 0.1]])
    stats = LinearStats(torch.eye(2), 1)
    scores = ria_scores(W, stats)
    assert scores[0, 1] > scores[0, 0]  # 4/9 + 4/4.2 > 5/9 + 5/15
    keep = _solve(W, stats, Unstructured(0.5)).keep_mask
    assert keep.tolist() == [[False, True], [True, False], [True, False]]


def test_power_zero_ignores_the_inputs_and_dead_rows_and_columns_give_no_nan() -> None:
    W = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 2.0, 3.0]])
    stats = LinearStats(torch.diag(torch.tensor([0.0, 0.0, 9.0, 1.0])), 4)  # two dead inputs
    scores = ria_scores(W, stats)
    assert torch.isfinite(scores).all() and (scores[0] == 0).all()
    no_inputs = ria_scores(W, stats, power=0.0)
    assert torch.isfinite(no_inputs).all() and no_inputs[1, 0] > 0  # (‖X‖)^0 = 1 even for a dead input
    assert _solve(W, stats, NM(2, 4)).keep_mask.sum() == 4


@pytest.mark.parametrize("target", [Unstructured(0.5), Unstructured(0.7), NM(2, 4), NM(4, 8)], ids=str)
@pytest.mark.parametrize("group", ["row", "matrix"])
def test_properties(target: object, group: str) -> None:
    _, stats = correlated_stats(32, tokens=256)
    W = torch.randn(24, 32, generator=torch.Generator().manual_seed(1))
    before = W.clone()
    result = _solve(W, stats, target, group=group)
    assert torch.equal(W, before)  # the input is not mutated
    keep = result.keep_mask
    assert torch.equal(result.weight, W * keep)
    if isinstance(target, NM):
        assert nm_violations(keep, target) == 0 and int(keep.sum()) == W.numel() * target.n // target.m
    else:
        assert isinstance(target, Unstructured)
        if group == "row":  # every row exactly ⌊p · in⌋ sparse
            assert ((~keep).sum(1) == int(target.sparsity * W.shape[1])).all()
        else:
            assert int((~keep).sum()) == unstructured_count(target, W.numel())


def test_options_and_targets_are_checked() -> None:
    with pytest.raises(ToolkitError, match="power"):
        get_method("ria").make_config({"power": "-1"})
    with pytest.raises(ToolkitError, match="group"):
        get_method("ria").make_config({"group": "column"})
    assert not get_method("ria").supports(Structured(0.3))
    with pytest.raises(ToolkitError, match="ria supports unstructured"):
        RunConfig(model="tiny-llama", method="ria", sparsity="structured:30%")
