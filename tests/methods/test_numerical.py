"""Numerical Pruning's score (closed form = Newton) and Theorem 3's compensation on small random cases."""

from __future__ import annotations

import math

import pytest
import torch

from tests.helpers.stats import correlated_stats
from toolkit.errors import ToolkitError
from toolkit.methods import get_method
from toolkit.methods.base import LinearStats, Scope, SolveContext
from toolkit.methods.block.base import HeadLayout, InputStats, unit_means
from toolkit.methods.block.compensation import bias_update, compensate, eq11_update, least_squares_update, output_error
from toolkit.methods.block.numerical import (
    NumericalConfig,
    channel_scores,
    closed_form_scores,
    newton_scores,
    objective,
    score_matrix,
)


def _case(width: int = 24, out: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, InputStats]:
    X, stats = correlated_stats(width, tokens=600, seed=seed)
    W = torch.randn(out, width, generator=torch.Generator().manual_seed(seed + 1))
    return X, W, InputStats(gram=stats.gram, mean=X.mean(0), count=X.shape[0])


def test_closed_form_equals_newton_iterate_at_convergence() -> None:
    _, W, stats = _case()
    A = score_matrix(W, stats.gram) + 1e-3 * torch.eye(24, dtype=torch.float64)
    trace: list[float] = []
    for lam in (0.1, 10.0, 1e3):
        z_newton = newton_scores(A, 0.3, lam, 50, lambda t, f, g: trace.append(f))
        torch.testing.assert_close(z_newton, closed_form_scores(A, 0.3, lam), atol=1e-9, rtol=0)
    # one Newton step already lands on the minimiser of the quadratic: later steps leave f unchanged
    assert trace[1] == pytest.approx(trace[0], rel=1e-9) and trace[-1] == pytest.approx(trace[-50], rel=1e-9)


def test_closed_form_is_the_minimiser_and_large_lambda_meets_the_budget() -> None:
    _, W, stats = _case(seed=3)
    A = score_matrix(W, stats.gram) + 1e-3 * torch.eye(24, dtype=torch.float64)
    z = closed_form_scores(A, 0.25, 5.0)
    r = 0.75 * 24
    for _ in range(5):  # any perturbation raises f
        bumped = z + 1e-3 * torch.randn(24, dtype=torch.float64)
        assert objective(A, bumped, r, 5.0) > objective(A, z, r, 5.0)
    z_inf = closed_form_scores(A, 0.25, 0.0)  # λ → ∞: Σz = r exactly
    assert float(z_inf.sum()) == pytest.approx(r, rel=1e-10)
    torch.testing.assert_close(closed_form_scores(A, 0.25, 1e12), z_inf, atol=1e-8, rtol=0)


def test_ranking_inside_a_layer_does_not_depend_on_lambda() -> None:
    _, W, stats = _case(seed=5)
    A = score_matrix(W, stats.gram) + 1e-3 * torch.eye(24, dtype=torch.float64)
    orders = {tuple(torch.argsort(closed_form_scores(A, 0.3, lam))[:6].tolist()) for lam in (1e-3, 1.0, 1e3, 0.0)}
    assert len(orders) == 1


def test_diagonal_A_by_hand() -> None:
    """A = diag(a): u = 1/a, z = 1 − ρD·(1/a)/Σ(1/a); with a = (1, 2, 4, 4), ρ = 0.5: Σ1/a = 2."""
    A = torch.diag(torch.tensor([1.0, 2.0, 4.0, 4.0], dtype=torch.float64))
    z = closed_form_scores(A, 0.5, 0.0)
    torch.testing.assert_close(z, torch.tensor([0.0, 0.5, 0.75, 0.75], dtype=torch.float64))


def test_newton_option_emits_one_solver_step_per_iteration_and_agrees() -> None:
    _, W, stats = _case(seed=7)
    events: list = []
    ctx = SolveContext(layer=2, name="o", emit=events.append)
    closed = channel_scores(W, stats, 0.3, NumericalConfig(lam=10.0), ctx)
    newton = channel_scores(W, stats, 0.3, NumericalConfig(lam=10.0, score_solver="newton", newton_steps=7), ctx)
    torch.testing.assert_close(newton, closed, atol=1e-5, rtol=0)
    assert [e.step for e in events if e.solver == "newton"] == list(range(8)) and all(e.layer == 2 for e in events)
    # the closed form reports f(z₀) and f(z*), the value Newton's iterations settle on
    first, last = [e.objective for e in events if e.solver == "closed_form"]
    assert last < first and last == pytest.approx(events[-1].objective, rel=1e-6)
    assert events[-1].objective < events[-8].objective
    # λ → ∞ (lam ≤ 0): the literal solver uses a large finite λ and still agrees
    limit = channel_scores(W, stats, 0.3, NumericalConfig(), ctx)
    literal = channel_scores(W, stats, 0.3, NumericalConfig(score_solver="newton", newton_steps=3), ctx)
    torch.testing.assert_close(literal, limit, atol=1e-4, rtol=0)


def test_head_score_is_the_mean_of_its_channels() -> None:
    channels = torch.arange(12, dtype=torch.float32)  # 3 heads of Dh = 4 with n_rep = 3 → one group
    per_head = HeadLayout(torch.arange(3), 4, 3, 3, owns_kv=False)
    torch.testing.assert_close(unit_means(channels, per_head), torch.tensor([1.5, 5.5, 9.5]))
    group = HeadLayout(torch.zeros(3, dtype=torch.long), 4, 3, 1, owns_kv=True)
    torch.testing.assert_close(unit_means(channels, group), torch.tensor([5.5]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compensation_equals_least_squares_and_eq11(seed: int) -> None:
    X, W, stats = _case(seed=seed)
    keep = torch.ones(24, dtype=torch.bool)
    keep[torch.randperm(24, generator=torch.Generator().manual_seed(seed))[:9]] = False
    new, _ = least_squares_update(W, stats, keep, 0.0, lambda m: None)
    # the kept columns are the least-squares fit of the dense outputs X Wᵀ on the kept inputs X_K
    fit = torch.linalg.lstsq(X[:, keep].double(), (X @ W.T).double()).solution.T
    torch.testing.assert_close(new[:, keep].double(), fit, atol=2e-4, rtol=2e-4)
    assert bool((new[:, ~keep] == 0).all())
    gamma = 0.05 * float(torch.diagonal(stats.gram).mean())
    damped, _ = least_squares_update(W, stats, keep, 0.05, lambda m: None)
    torch.testing.assert_close(damped, eq11_update(W, stats.gram, keep, gamma), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("damp", [0.0, 0.01, 1.0])
def test_compensation_never_increases_the_reconstruction_error(damp: float) -> None:
    for seed in range(5):
        _, W, stats = _case(seed=seed)
        keep = torch.rand(24, generator=torch.Generator().manual_seed(seed)) > 0.4
        plain = output_error(W, W * keep, stats)
        for method in ("least_squares", "least_squares_bias", "bias", "none"):
            new, bias, _ = compensate(W, stats, keep, method, damp, lambda m: None)
            assert output_error(W, new, stats, bias) <= plain + 1e-9


def test_least_squares_with_bias_is_the_affine_fit_and_beats_both() -> None:
    X, W, stats = _case(seed=4)
    X = X + torch.linspace(-2, 3, 24)  # inputs with non-zero means
    stats = InputStats(gram=X.T @ X / X.shape[0], mean=X.mean(0), count=X.shape[0])
    keep = torch.rand(24, generator=torch.Generator().manual_seed(4)) > 0.5
    new, bias, _ = compensate(W, stats, keep, "least_squares_bias", 0.0, lambda m: None)
    ones = torch.ones(X.shape[0], 1)
    fit = torch.linalg.lstsq(torch.cat([X[:, keep], ones], 1).double(), (X @ W.T).double()).solution.T
    torch.testing.assert_close(torch.cat([new[:, keep], bias.unsqueeze(1)], 1).double(), fit, atol=1e-3, rtol=1e-3)
    errors = []
    for method in ("least_squares", "bias"):
        other, other_bias, _ = compensate(W, stats, keep, method, 0.0, lambda m: None)
        errors.append(output_error(W, other, stats, other_bias))
    assert output_error(W, new, stats, bias) <= min(errors) + 1e-9


def test_bias_compensation_by_hand() -> None:
    W = torch.tensor([[1.0, 2.0, 3.0], [0.0, -1.0, 1.0]])
    stats = InputStats(gram=torch.eye(3), mean=torch.tensor([0.5, 1.0, 2.0]), count=10)
    keep = torch.tensor([True, False, False])
    torch.testing.assert_close(bias_update(W, stats, keep), torch.tensor([2.0 + 6.0, -1.0 + 2.0]))


def test_singular_gram_escalates_damping_with_a_warning() -> None:
    X = torch.randn(5, 12, generator=torch.Generator().manual_seed(0))  # 5 tokens < 12 inputs
    stats = InputStats(gram=X.T @ X / 5, mean=X.mean(0), count=5)
    warnings: list[str] = []
    keep = torch.ones(12, dtype=torch.bool)
    keep[:3] = False
    new, damp = least_squares_update(torch.randn(4, 12), stats, keep, 0.0, warnings.append)
    assert damp > 0 and warnings and torch.isfinite(new).all()


def test_spec_is_block_scope_and_refuses_linear_calls() -> None:
    spec = get_method("numerical")
    assert spec.scope is Scope.BLOCK and math.isclose(spec.make_config().damp_frac, 0.01)
    with pytest.raises(ToolkitError, match="block-scope"):
        spec.fn(torch.zeros(2, 2), LinearStats(gram=torch.eye(2), count=1), None, spec.make_config(), SolveContext())
    with pytest.raises(ToolkitError, match="min_heads"):
        spec.make_config({"min_heads": "0"})
