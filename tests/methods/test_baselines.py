"""Magnitude, Wanda and SparseGPT: hand cases, comparison groups and properties over every target."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.stats import correlated_stats
from toolkit.engine.solve import reconstruction_errors
from toolkit.errors import NumericalError, ToolkitError
from toolkit.events import RunWarning
from toolkit.methods import METHODS, get_method
from toolkit.methods.base import LinearStats, SolveContext, damped_cholesky_inverse
from toolkit.methods.masks import nm_violations
from toolkit.spec.targets import NM, Structured, Unstructured

BASELINES = ("magnitude", "wanda", "sparsegpt")
TARGETS = (Unstructured(0.5), Unstructured(0.7), NM(2, 4), NM(4, 8), Structured(0.3))


def _solve(name: str, W: torch.Tensor, stats: LinearStats, target: object, **options: object):
    spec = get_method(name)
    return spec.fn(W, stats, target, spec.make_config(options), SolveContext())


def test_magnitude_hand_case_1x8() -> None:
    W = torch.tensor([[0.1, -0.8, 0.3, -0.05, 0.6, 0.2, -0.4, 0.7]])
    result = _solve("magnitude", W, LinearStats(torch.eye(8), 1), Unstructured(0.5))
    assert result.keep_mask.tolist() == [[False, True, False, False, True, False, True, True]]
    assert torch.equal(result.weight, W * result.keep_mask)


def test_wanda_uses_input_norms_and_per_row_group() -> None:
    W = torch.tensor([[1.0, 1.0, 1.0, 1.0], [4.0, 3.0, 2.0, 1.0]])
    gram = torch.diag(torch.tensor([1.0, 4.0, 9.0, 16.0]))  # ‖X_j‖ = 1, 2, 3, 4
    result = _solve("wanda", W, LinearStats(gram, 10), Unstructured(0.5))
    # row 0 scores 1,2,3,4 → keep the last two; row 1 scores 4,6,6,4 → keep the middle two
    assert result.keep_mask.tolist() == [[False, False, True, True], [False, True, True, False]]
    assert (result.keep_mask.sum(1) == 2).all()  # every row exactly 50 %


@pytest.mark.parametrize("name", BASELINES)
@pytest.mark.parametrize("target", TARGETS, ids=str)
def test_exact_sparsity_and_pattern(name: str, target: object, stats256: tuple) -> None:
    _, stats = stats256
    W = torch.randn(64, 256)
    before = W.clone()
    result = _solve(name, W, stats, target)
    assert torch.equal(W, before), "the input weight must not be mutated"
    assert torch.equal(result.weight != 0, result.keep_mask) or bool((result.weight[~result.keep_mask] == 0).all())
    zeros = int((~result.keep_mask).sum())
    if isinstance(target, NM):
        assert nm_violations(result.keep_mask, target) == 0
        assert zeros == W.numel() * (target.m - target.n) // target.m
    elif isinstance(target, Structured):
        removed = (~result.keep_mask).all(0)
        assert int(removed.sum()) == int(256 * target.sparsity)
        assert zeros == int(removed.sum()) * 64
    else:
        assert zeros == int(W.numel() * target.sparsity) or zeros == 64 * int(256 * target.sparsity)


@pytest.mark.parametrize("target", (Unstructured(0.5), NM(2, 4), NM(4, 8)), ids=str)
def test_error_order_sparsegpt_wanda_magnitude(target: object) -> None:
    _, stats = correlated_stats(256, seed=3)
    W = torch.randn(128, 256)
    errors = {name: reconstruction_errors(W, _solve(name, W, stats, target).weight, stats)[0] for name in BASELINES}
    assert errors["sparsegpt"] <= errors["wanda"] <= errors["magnitude"], errors


def test_gram_error_equals_direct_error() -> None:
    X, stats = correlated_stats(64, tokens=500, seed=1)
    W = torch.randn(16, 64)
    new = _solve("sparsegpt", W, stats, Unstructured(0.5)).weight
    direct = torch.linalg.norm(X @ (new - W).T) / torch.linalg.norm(X @ W.T)
    assert reconstruction_errors(W, new, stats)[0] == pytest.approx(float(direct), rel=1e-4)


def test_sparsegpt_block_size_does_not_change_totals(stats256: tuple) -> None:
    _, stats = stats256
    W = torch.randn(32, 256)
    for block in (16, 100, 128, 1000):
        result = _solve("sparsegpt", W, stats, Unstructured(0.37), block_size=block)
        assert int((~result.keep_mask).sum()) == int(W.numel() * 0.37)


def test_damping_escalates_with_warning_then_raises() -> None:
    events: list = []
    ctx = SolveContext(name="x", emit=events.append)
    v = torch.randn(8, 1, generator=torch.Generator().manual_seed(0))  # seeded: not the global RNG's state
    H = v @ v.T  # rank 1: singular, Cholesky fails without damping
    U, damping = damped_cholesky_inverse(H, 0.0, ctx)
    assert damping == pytest.approx(1e-4) and any(isinstance(e, RunWarning) for e in events)
    damped = H + damping * torch.diagonal(H).mean() * torch.eye(8)
    # UᵀU is the inverse of the damped H: a scale-free residual (entries of the inverse reach 1e4, so an
    # entry-wise tolerance failed on some draws); measured 0.004–0.008 over seeds 0–5 in float32
    residual = (U.T @ U).double() @ damped.double() - torch.eye(8, dtype=torch.float64)
    assert float(torch.linalg.norm(residual)) < 0.05
    with pytest.raises(NumericalError):
        damped_cholesky_inverse(-torch.eye(8) * 1e6, 1e-9, SolveContext(), max_tries=2)


def test_registry_did_you_mean_and_options() -> None:
    with pytest.raises(ToolkitError, match="Did you mean: wanda"):
        get_method("wandda")
    with pytest.raises(ToolkitError, match="must be int"):
        METHODS["sparsegpt"].make_config({"block_size": "x"})
    with pytest.raises(ToolkitError, match="no option"):
        METHODS["sparsegpt"].make_config({"blok": "3"})
    assert METHODS["sparsegpt"].make_config({"block_size": "64"}).block_size == 64
