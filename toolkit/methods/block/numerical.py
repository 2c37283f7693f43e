"""Numerical Pruning (Shen et al., AAAI 2025, arXiv:2412.12441): Newton's-method scores of input channels.

For o_proj and down_proj of every layer (paper layout Y = X W, W = ``weight``ᵀ ∈ R^{D×D'}), the mask
M ∈ {0,1}^D on the D input channels is relaxed to z ∈ [0,1]^D and Eq. 3 is minimised:

    f(z) = ½ Σ_i ‖X W_{*,i} − X (z ∘ W_{*,i})‖² + ½ λ (⟨1, z⟩ − r)²,    r = (1 − ρ) D
         = ½ (1 − z)ᵀ A (1 − z) + ½ λ (1ᵀz − r)²,       A = (W Wᵀ) ∘ (XᵀX)         (Eqs. 4–7)

Algorithm 1 takes Newton steps z ← z − H⁻¹g with g = A(z − 1) + λ(1ᵀz − r)1 and the constant
Hessian H = A + λ11ᵀ. f is an exact quadratic, so Newton lands on the minimiser in one step
(notes §1.5; Sherman–Morrison):

    z* = 1 − c·u,   u = A⁻¹1,   s = 1ᵀu,   c = λρD / (1 + λs)   →  ρD / s  as λ → ∞ (then Σz* = r)

``score_solver=closed_form`` (default) evaluates this; ``newton`` runs Algorithm 1 literally
(``newton_steps`` steps from z₀ = (1−ρ)1); they agree (tested). Either way every output projection
emits :class:`SolverStep` s with f(z): step 0 at z₀, then step 1 at z* (closed form: the one exact
Newton step) or one per iteration (newton). Here XᵀX is the mean Gram G = Σxxᵀ/N (the paper's
unstated "normalization"; it only rescales λ) and A gets ``score_damp``·mean(diag A) on its diagonal
(not in the paper: A is singular for dead channels or few tokens). A head's score is the mean of
its Dh channel scores (Eq. 8; over the whole KV group with ``gqa=groups``); MLP channels keep their own score.
Comparison group: all heads and channels of all layers (one global ranking, :mod:`toolkit.engine.block.plan`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from toolkit.errors import ToolkitError
from toolkit.events import SolverStep
from toolkit.methods.base import MethodSpec, Produces, Scope, SolveContext, option
from toolkit.methods.block.base import (
    BlockConfig,
    BlockStats,
    BlockTensors,
    HeadLayout,
    InputStats,
    UnitScores,
    column_unit_scores,
    not_a_linear_solver,
)
from toolkit.methods.block.compensation import SOLVE_DTYPE, damped_cholesky, with_damping
from toolkit.spec.compression import Unit
from toolkit.spec.targets import Structured

SCORE_SOLVERS = ("closed_form", "newton")
NEWTON_INF_SCALE = 1e4  # λ for the literal solver when lam ≤ 0 (λ → ∞): this × mean(diag A)


@dataclass(frozen=True)
class NumericalConfig(BlockConfig):
    """Numerical Pruning: score solver, penalty λ, Newton steps, score damping (+ the block options)."""

    score_solver: str = option("closed_form", "closed_form (z* = 1 − c·A⁻¹1, one solve) or newton (Algorithm 1 "
                               "literally, newton_steps steps; same result)", SCORE_SOLVERS)
    lam: float = option(0.0, "penalty λ of Eq. 3; ≤ 0 means λ → ∞ (Σz = (1−ρ)D exactly); newton then uses "
                        f"{NEWTON_INF_SCALE:g}·mean(diag A)")
    newton_steps: int = option(50, "Newton iterations T of Algorithm 1 (score_solver=newton; the paper: ~50)")
    score_damp: float = option(0.01, "damping of A = (WWᵀ)∘(XᵀX) as a fraction of mean(diag A)")

    def __post_init__(self) -> None:
        BlockConfig.__post_init__(self)
        if self.newton_steps < 1 or self.score_damp < 0:
            raise ToolkitError("newton_steps must be ≥ 1 and score_damp ≥ 0")


def score_matrix(W: Tensor, gram: Tensor) -> Tensor:
    """A = (W Wᵀ) ∘ G in paper layout; ``W`` is HF (out, in), so W Wᵀ = ``W.T @ W`` (in, in). float64."""
    Wd = W.to(SOLVE_DTYPE)
    return (Wd.T @ Wd) * gram.to(SOLVE_DTYPE)


def closed_form_scores(A: Tensor, ratio: float, lam: float, L: Tensor | None = None) -> Tensor:
    """z* = 1 − c·A⁻¹1 with c = λρD/(1 + λs) (λ ≤ 0: c = ρD/s); ``L`` the Cholesky factor of A if known."""
    D = A.shape[0]
    ones = torch.ones(D, 1, dtype=A.dtype, device=A.device)
    L = torch.linalg.cholesky(A) if L is None else L
    u = torch.cholesky_solve(ones, L).flatten()  # (D,)
    s = float(u.sum())
    c = ratio * D / s if lam <= 0 else lam * ratio * D / (1 + lam * s)
    return 1.0 - c * u


def objective(A: Tensor, z: Tensor, r: float, lam: float) -> float:
    """f(z) = ½(1 − z)ᵀA(1 − z) + ½λ(1ᵀz − r)² (Eq. 3 with Eqs. 4–5)."""
    e = 1.0 - z
    return float(0.5 * e @ (A @ e) + 0.5 * lam * (z.sum() - r) ** 2)


def newton_scores(
    A: Tensor, ratio: float, lam: float, steps: int, on_step: Callable[[int, float, float], None]
) -> Tensor:
    """Algorithm 1: z_{t+1} = z_t − H⁻¹ g_t from z₀ = (1 − ρ)1, H = A + λ11ᵀ factorized once.

    ``on_step(t, f(z_t), ‖g_t‖)`` is called after every step. No clipping to [0, 1] (the paper has none).
    """
    D = A.shape[0]
    r = (1.0 - ratio) * D
    ones = torch.ones(D, dtype=A.dtype, device=A.device)
    L = torch.linalg.cholesky(A + lam * torch.outer(ones, ones))
    z = torch.full((D,), 1.0 - ratio, dtype=A.dtype, device=A.device)
    for t in range(steps):
        g = A @ (z - 1.0) + lam * (z.sum() - r) * ones
        z = z - torch.cholesky_solve(g.unsqueeze(1), L).flatten()
        on_step(t + 1, objective(A, z, r, lam), float(torch.linalg.vector_norm(g)))
    return z


def channel_scores(W: Tensor, stats: InputStats, ratio: float, cfg: NumericalConfig, ctx: SolveContext) -> Tensor:
    """Numerical scores z (in,) of the input channels of one output projection ``W`` (out, in)."""
    A = score_matrix(W, stats.gram)
    L, damp = damped_cholesky(A, cfg.score_damp, ctx.warn, f"layer {ctx.layer} {ctx.name} score")
    A = with_damping(A, damp)
    closed = cfg.score_solver == "closed_form"
    # λ → ∞ (lam ≤ 0): z₀ and z* both meet 1ᵀz = r, so the penalty term is 0 and f is its first term
    lam = cfg.lam if cfg.lam > 0 else (0.0 if closed else NEWTON_INF_SCALE * float(torch.diagonal(A).mean()))
    r = (1.0 - ratio) * A.shape[0]

    def step(t: int, value: float, grad_norm: float = float("nan")) -> None:
        ctx.check_cancel()
        ctx.emit(SolverStep(layer=ctx.layer, name=ctx.name, solver=cfg.score_solver, step=t, objective=value,
                            values={} if closed else {"grad_norm": grad_norm}))

    z0 = torch.full((A.shape[0],), 1.0 - ratio, dtype=A.dtype, device=A.device)
    if closed:  # f at z₀, then after the one exact Newton step that lands on z*
        step(0, objective(A, z0, r, lam))
        z = closed_form_scores(A, ratio, cfg.lam, L)
        step(1, objective(A, z, r, lam))
        return z.float()
    step(0, objective(A, z0, r, lam), float(torch.linalg.vector_norm(A @ (z0 - 1.0))))  # 1ᵀz₀ = r
    return newton_scores(A, ratio, lam, cfg.newton_steps, step).float()


def score(
    tensors: BlockTensors, stats: BlockStats, layout: HeadLayout, ratio: float, cfg: NumericalConfig,
    ctx: SolveContext | None = None,
) -> UnitScores:
    """Head-unit scores (mean of o_proj channel scores) and MLP channel scores of one layer."""
    not_a_linear_solver("numerical")(tensors)
    return column_unit_scores(tensors, stats, layout,
                              lambda role, W, s: channel_scores(W, s, ratio, cfg, _named(ctx, role)))


def _named(ctx: SolveContext | None, role: str) -> SolveContext:
    ctx = ctx or SolveContext()
    return SolveContext(layer=ctx.layer, name=role, emit=ctx.emit, cancelled=ctx.cancelled)


SPEC = MethodSpec(
    name="numerical",
    fn=score,  # type: ignore[arg-type] - a block scorer (see toolkit.methods.block.base)
    config=NumericalConfig,
    needs=frozenset(),
    targets=(Structured,),
    summary="Numerical Pruning: Newton scores of heads/channels, global ranking, least-squares compensation",
    scope=Scope.BLOCK,
    produces=frozenset({Produces.STRUCTURE}),
    units=(Unit.HEADS, Unit.CHANNELS, Unit.HEADS_CHANNELS),
)
