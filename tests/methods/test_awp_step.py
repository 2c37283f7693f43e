"""AWP's step options: spectral vs the paper's step on a known optimum, Armijo monotonicity, the trace, bad input."""

from __future__ import annotations

import itertools
import math
from typing import cast

import pytest
import torch

from tests.helpers.stats import correlated_stats
from toolkit.errors import ToolkitError
from toolkit.events import SolverStep
from toolkit.methods import awp
from toolkit.methods.awp_projection import Iterate, Projector
from toolkit.methods.awp_solver import Quadratic, Schedule, Trace, run_pgd
from toolkit.methods.awp_step import make_stepper, spectral_norm
from toolkit.methods.base import LinearStats, SolveContext
from toolkit.methods.quant_grid import quantize
from toolkit.spec.compression import QuantSpec
from toolkit.spec.targets import Unstructured

INT3 = QuantSpec(3, 64)
INT4 = QuantSpec(4, 64)


def solve(W, stats, target, quant=None, events=None, **options):
    ctx = SolveContext(layer=2, name="self_attn.q_proj", quant=quant,
                       emit=events.append if events is not None else lambda e: None)
    return awp.prune(W, stats, target, awp.SPEC.make_config(options), ctx)


@pytest.fixture(scope="module")
def problem() -> tuple[torch.Tensor, LinearStats]:
    _, stats = correlated_stats(128, seed=3)
    return torch.randn(64, 128, generator=torch.Generator().manual_seed(7)), stats


def flat_spectrum(width: int, low: float, seed: int = 0) -> torch.Tensor:
    """C = Q diag(λ) Qᵀ with λ evenly in [low, 1]: ‖C‖₂ = 1 and ‖C‖_F ≈ √width · mean λ ≫ ‖C‖₂."""
    gen = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(width, width, generator=gen, dtype=torch.float64))
    lam = torch.linspace(low, 1.0, width, dtype=torch.float64)
    return ((Q * lam) @ Q.T).float()


class Relaxed:
    """The continuous relaxation: Proj = identity, so the optimum is Θ* = W with f* = 0."""

    target = None
    spec = None
    ramp = 0
    quant_from = 1

    def __call__(self, Z: torch.Tensor, step: int, current: Iterate | None = None) -> Iterate:
        return Iterate(Z)

    def finalize(self, iterate: Iterate) -> Iterate:
        return iterate


def relaxed_loss(kind: str, W: torch.Tensor, C: torch.Tensor, iterations: int) -> float:
    project = cast(Projector, Relaxed())
    c_fro, c_spec = float(torch.linalg.norm(C)), spectral_norm(C, 50)
    stepper = make_stepper(kind, c_fro, c_spec, 1.5, 1.0, project)
    q = Quadratic.build(W, C)
    out = run_pgd(q, Iterate(torch.zeros_like(W)), project, Schedule(iterations, stepper.eta, emit_every=0),
                  SolveContext(layer=0, name="x"), Trace(stepper))
    return q.loss(out.objective)


def test_spectral_step_reaches_a_lower_objective_than_the_papers_on_an_ill_conditioned_c() -> None:
    C = flat_spectrum(96, 0.05)
    fro, spec = float(torch.linalg.norm(C)), float(torch.linalg.eigvalsh(C.double()).max())
    assert fro / spec > 5  # ‖C‖_F ≫ ‖C‖₂: the paper's 1.5/‖C‖_F is a small fraction of 1/L
    W = torch.randn(16, 96, generator=torch.Generator().manual_seed(1))
    start = float(torch.sum((W @ C) * W))
    paper, spectral = relaxed_loss("paper", W, C, 10), relaxed_loss("spectral", W, C, 10)
    # closed form from Θ0 = 0: f_N = Σ_i λ_i (1 − ηλ_i)^{2N} ‖W v_i‖²
    lam, V = torch.linalg.eigh(C.double())
    proj = ((W.double() @ V) ** 2).sum(0)
    for eta, got in ((1.5 / fro, paper), (1.0 / spectral_norm(C, 50), spectral)):
        assert got == pytest.approx(float((lam * (1 - eta * lam) ** 20 * proj).sum()), rel=1e-3)
    assert spectral < 0.1 * paper < start


def test_spectral_norm_matches_the_largest_eigenvalue_and_handles_zero_and_dead_columns() -> None:
    _, stats = correlated_stats(64, seed=1)
    true = float(torch.linalg.eigvalsh(stats.gram.double()).max())
    assert spectral_norm(stats.gram, 30) == pytest.approx(true, rel=1e-3)
    assert spectral_norm(stats.gram, 30) <= true * (1 + 1e-5)  # a Rayleigh quotient never overshoots
    assert spectral_norm(torch.zeros(8, 8), 5) == 0.0
    dead = stats.gram.clone()
    dead[:10], dead[:, :10] = 0, 0
    assert math.isfinite(spectral_norm(dead, 30))


@pytest.mark.parametrize("quant, target", [(INT4, None), (INT3, None), (INT4, Unstructured(0.5))])
def test_backtracking_decreases_the_objective_at_every_step(problem, quant, target) -> None:
    W, stats = problem
    events: list = []
    result = solve(W, stats, target, quant, events, step="backtracking", iterations=40, ramp_iters=5,
                   hold_iters=5)
    steps = [e for e in events if isinstance(e, SolverStep)]
    settled = [e.objective for e in steps if target is None or e.step >= 11]  # after the joint set is fixed
    assert len(settled) >= 2
    assert all(b < a for a, b in itertools.pairwise(settled))
    assert result.info["step"] == "backtracking" and result.info["residuals"] >= result.info["iterations"]
    if target is None:  # from RTN: never worse than the start
        assert result.info["objective"] < result.info["objective_init"]


def test_the_trace_carries_the_loss_the_c_ratio_and_the_codes_changed_from_rtn(problem) -> None:
    W, stats = problem
    events: list = []
    result = solve(W, stats, None, INT4, events, step="spectral")
    steps = [e for e in events if isinstance(e, SolverStep)]
    C = stats.gram
    assert steps[0].values["c_ratio"] == pytest.approx(
        float(torch.linalg.norm(C)) / float(torch.linalg.eigvalsh(C.double()).max()), rel=1e-3)
    D = (W - result.weight).double()
    assert steps[-1].values["loss"] == pytest.approx(float(torch.trace(D @ C.double() @ D.T)), rel=1e-4)
    rtn = quantize(W, INT4).codes
    assert result.quant is not None
    changed = float((result.quant.codes != rtn).double().mean())
    assert steps[-1].values["codes_changed"] == pytest.approx(changed)
    assert result.info["codes_changed"] == pytest.approx(changed)
    assert steps[0].values["codes_changed"] == 0.0  # Θ0 is RTN itself
    assert all("eta" in e.values for e in steps[1:-1])


@pytest.mark.parametrize("step", ["paper", "spectral", "jacobi", "backtracking"])
def test_dead_inputs_give_finite_results_for_every_step(problem, step) -> None:
    W, stats = problem
    C = stats.gram.clone()
    C[:, :16], C[:16, :] = 0, 0  # 16 inputs never fire
    events: list = []
    result = solve(W, LinearStats(gram=C, count=stats.count), None, INT4, events, step=step, iterations=20)
    assert bool(torch.isfinite(result.weight).all())
    assert all(math.isfinite(e.objective) and all(math.isfinite(v) for v in e.values.values()
                                                   if not math.isnan(v)) for e in events if isinstance(e, SolverStep))
    assert math.isfinite(result.info["objective"]) and math.isfinite(result.info["c_ratio"])


def test_gradient_stop_uses_the_papers_rule_and_cap(problem) -> None:
    W, stats = problem
    capped = solve(W, stats, Unstructured(0.5), None, stop="gradient", tol=0.0, max_events=0)
    assert capped.info["stop_rule"] == "full_grad" and capped.info["iterations"] == 200
    early = solve(W, stats, Unstructured(0.5), None, stop="gradient", tol=10.0, max_events=0)
    assert early.info["stop"] == "tol" and early.info["iterations"] == 0
    assert solve(W, stats, None, INT4, stop="gradient", iterations=7, max_events=0).info["iterations"] <= 7


@pytest.mark.parametrize("options, message", [
    ({"step": "newton"}, "option step of awp must be one of"),
    ({"iterations": "0"}, "iterations must be ≥ 1"),
    ({"quant_eta": "0"}, "quant_eta must be a positive number"),
    ({"quant_eta": "-1.5"}, "quant_eta must be a positive number"),
    ({"spectral_scale": "0"}, "spectral_scale must be a positive number"),
    ({"power_iters": "0"}, "power_iters must be ≥ 1"),
    ({"stop": "gradient", "stop_rule": "rel_change"}, "stop=gradient is the full_grad rule"),
])
def test_bad_step_options_raise_one_clear_line(options, message) -> None:
    with pytest.raises(ToolkitError, match=message) as err:
        awp.SPEC.make_config(options)
    assert "\n" not in str(err.value)
