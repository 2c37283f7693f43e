"""AWP's Jacobi step (ours): a step per input, against the paper's and the spectral step on a dominated C."""

from __future__ import annotations

from typing import cast

import pytest
import torch

from tests.methods.test_awp_step import INT4, Relaxed, relaxed_loss, solve
from toolkit.methods.awp_projection import Iterate, Projector
from toolkit.methods.awp_solver import Quadratic, Schedule, Trace, run_pgd
from toolkit.methods.awp_step import jacobi_stepper, spectral_norm
from toolkit.methods.base import LinearStats, SolveContext


def dominated(width: int, seed: int = 0) -> torch.Tensor:
    """C = 50·v vᵀ on 3 loud inputs + a diagonal spread over three decades: ‖C‖_F ≈ ‖C‖₂, C_jj ≪ ‖C‖₂ mostly.

    The shape measured on smollm2's linears (one direction carries C's energy: docs/methods/awp.md).
    """
    gen = torch.Generator().manual_seed(seed)
    v = torch.zeros(width, dtype=torch.float64)
    v[:3] = torch.rand(3, generator=gen, dtype=torch.float64) + 1.0
    diag = 10 ** (-3 * torch.rand(width, generator=gen, dtype=torch.float64))
    X = torch.randn(width, 4 * width, generator=gen, dtype=torch.float64) * 0.05
    return (50 * torch.outer(v, v) + torch.diag(diag) + X @ X.T / (4 * width)).float()


def relaxed_jacobi_loss(W: torch.Tensor, C: torch.Tensor, iterations: int) -> float:
    project = cast(Projector, Relaxed())
    stepper, _ = jacobi_stepper(C, 1.0, 50)
    q = Quadratic.build(W, C)
    out = run_pgd(q, Iterate(torch.zeros_like(W)), project, Schedule(iterations, stepper.eta, emit_every=0),
                  SolveContext(layer=0, name="x"), Trace(stepper))
    return q.loss(out.objective)


def test_jacobi_step_reaches_a_far_lower_objective_where_one_direction_dominates_c() -> None:
    C = dominated(96)
    fro, spec = float(torch.linalg.norm(C)), float(torch.linalg.eigvalsh(C.double()).max())
    assert fro / spec < 1.05  # the paper's 1.5/‖C‖_F is already about 1.5/‖C‖₂
    W = torch.randn(16, 96, generator=torch.Generator().manual_seed(1))
    start = float(torch.sum((W @ C) * W))
    paper, spectral = relaxed_loss("paper", W, C, 10), relaxed_loss("spectral", W, C, 10)
    jacobi = relaxed_jacobi_loss(W, C, 10)
    assert jacobi < 0.2 * min(paper, spectral) < start


def test_jacobi_step_is_the_spectral_step_of_the_scaled_problem() -> None:
    C = dominated(40, seed=2)
    stepper, scaled_norm = jacobi_stepper(C, 1.0, 100)
    d = torch.diagonal(C).double()
    scaled = C.double() / torch.sqrt(torch.outer(d, d))
    assert scaled_norm == pytest.approx(float(torch.linalg.eigvalsh(scaled).max()), rel=1e-3)
    assert stepper.eta == pytest.approx(1.0 / scaled_norm)
    assert stepper.precond is not None
    assert torch.allclose(stepper.precond.double(), 1.0 / d, rtol=1e-5)


def test_jacobi_quantization_moves_codes_and_lowers_the_loss_from_rtn() -> None:
    C = dominated(128, seed=4)
    W = torch.randn(32, 128, generator=torch.Generator().manual_seed(5))
    stats = LinearStats(gram=C, count=1)
    paper, jacobi = solve(W, stats, None, INT4, step="paper"), solve(W, stats, None, INT4, step="jacobi")
    assert jacobi.info["step"] == "jacobi" and jacobi.info["c_scaled_spec"] > 0
    assert jacobi.info["codes_changed"] > paper.info["codes_changed"]  # the paper's step leaves RTN's codes
    assert jacobi.info["objective"] < 0.9 * paper.info["objective_init"]
    assert jacobi.info["objective"] < paper.info["objective"]


def test_jacobi_with_dead_inputs_gives_them_no_step_and_stays_finite() -> None:
    C = dominated(64, seed=6)
    C[:, :8], C[:8, :] = 0, 0  # 8 inputs never fire
    stepper, scaled_norm = jacobi_stepper(C, 1.0, 30)
    assert stepper.precond is not None
    assert bool((stepper.precond[:8] == 0).all()) and scaled_norm > 0
    W = torch.randn(16, 64, generator=torch.Generator().manual_seed(7))
    result = solve(W, LinearStats(gram=C, count=1), None, INT4, step="jacobi", iterations=20)
    assert bool(torch.isfinite(result.weight).all())
    assert spectral_norm(torch.zeros(4, 4), 3) == 0.0
