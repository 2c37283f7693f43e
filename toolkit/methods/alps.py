"""ALPS (Meng et al., NeurIPS 2024, arXiv:2406.07831): ADMM for the sparse layer-wise problem, then PCG.

For one linear with weight W (out, in) and Gram G = Σ x xᵀ / N (in, in) the problem is

    min_Ŵ  ‖W X − Ŵ X‖²_F = tr((Ŵ − W) G (Ŵ − W)ᵀ)   s.t.  Ŵ has the target pattern (k weights kept).

Numerics first (R12, as SparseGPT): inputs that are always zero (G_jj = 0) get W_:j = 0 and G_jj = 1,
then G_d = G + δ·mean(diag G)·I with δ = ``damp_frac``; the damping is returned in ``PruneResult.damping``
and the dead inputs in ``info``. The problem is solved in the scaled variables of the reference code,
s = √diag(G_d), Ĝ = G_d / (s sᵀ) (unit diagonal), W̃ = W·diag(s), so that a projection by |W̃_ij| is a
projection by |W_ij|·‖X_j‖ and the diagonal (Jacobi) preconditioner of the final PCG is the identity.
With Y = W̃ Ĝ (out, in) and the splitting Ŵ = D, D in the sparse set S, ADMM (scaled dual V) iterates

    Ŵ ← (Y − V + ρ D)(Ĝ + ρ I)⁻¹          ((Ĝ + ρ I)⁻¹ = Q diag(1/(Λ + ρ)) Qᵀ, Ĝ = Q Λ Qᵀ, once per ρ)
    D ← P_S(Ŵ + V/ρ)                        (keep the k largest |·|: whole matrix, or n of every m)
    V ← V + ρ (Ŵ − D)

and every ``update_every`` iterations compares the support of D with the last check: with c changed
entries and k kept weights, ρ ← 1.3ρ if c > 0.1k, 1.2ρ if c > 0.005k, 1.1ρ if c ≥ 1 (the paper's
increasing schedule, capped at ``rho_max``). Until ρ has gone up once, a support that barely moves
means ρ started too large to explore: ρ ← ρ/5, and a small non-zero change also restarts from
(Ŵ, D, V) = (W̃, P_S(W̃), 0) (the reference code's warm-up). The ADMM stops when the support is
stable: no change after ρ went up, or c < ``support_tol``·k after ``min_iters`` iterations. The
projected iterate P_S(Ŵ) of the last check is kept, or with ``keep_best`` (our decision, not in the
paper) the one with the lowest error among the checks and the start P_S(W̃): the warm-up can move
away from a better support. Then that support is fixed and each row solves its restricted normal equations by batched
(preconditioned) conjugate gradient from P_S(Ŵ):

    [Ŵ Ĝ]_i,S = [Y]_i,S,   Ŵ_i,∖S = 0   (rows independent; residual R = (Y − Ŵ Ĝ) ⊙ keep)

for at most ``pcg_iters`` steps or until every row's ‖R_i‖ ≤ ``pcg_tol``·‖Y_i ⊙ keep_i‖. The result is
Ŵ diag(1/s). Everything, the one eigendecomposition included, is float32 on W's device.

Events: one SolverStep (solver "alps") per support check and per PCG step; ``objective`` is the relative
error ‖(P_S(Ŵ) − W) X‖/‖W X‖ on the damped Gram, ``values`` hold ``rho``, ``primal`` = ‖Ŵ − D‖/‖W̃‖,
``dual`` = ρ‖D − D_prev‖/‖W̃‖, ``support_change`` = c/k and ``round`` (0 = ADMM, 1 = PCG).
Comparison group for unstructured targets: the whole matrix (as the reference code).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from toolkit.errors import NumericalError, ToolkitError
from toolkit.events import SolverStep
from toolkit.methods.base import SOLVER_DTYPE, LinearStats, MethodSpec, PruneResult, SolveContext, Stat, option
from toolkit.methods.masks import keep_mask_from_scores
from toolkit.spec.targets import NM, Target, Unstructured, unstructured_count, validate_for_shape

EIGEN_DTYPE = SOLVER_DTYPE  # the one eigendecomposition of Ĝ (unit diagonal, damped: float32 suffices)
RHO_STEPS = ((0.1, 1.3), (0.005, 1.2))  # (support change / k above which, factor on ρ): the paper's schedule
RHO_SLOW = 1.1  # factor on ρ for any smaller, non-zero support change once ρ has gone up
RHO_SHRINK = 5.0  # divisor of ρ while it has never gone up and the support barely moves (warm-up)


@dataclass(frozen=True)
class AlpsConfig:
    """ALPS options; defaults are the reference code's."""

    rho: float = option(0.1, "initial ADMM penalty ρ₀ (> 0) on the scaled problem (reference 0.1)")
    max_iters: int = option(300, "cap on ADMM iterations (reference 300)")
    update_every: int = option(3, "iterations between support checks, where ρ is updated (reference 3)")
    min_iters: int = option(30, "ADMM iterations before the support_tol stop may fire (reference 30)")
    support_tol: float = option(3e-4, "stop when fewer than support_tol·k weights change support between "
                                "checks (reference 3e-4)")
    rho_max: float = option(1e6, "cap on ρ (reference 1e6)")
    pcg_iters: int = option(10, "conjugate-gradient steps on the fixed support (0 = none; reference 10)")
    pcg_tol: float = option(1e-4, "stop PCG when every row's residual is below pcg_tol × its right-hand side")
    damp_frac: float = option(0.01, "ridge δ on the Gram as a fraction of mean(diag G) (reference 0.01)")
    keep_best: bool = option(True, "refine the projected iterate with the lowest error seen at a check (the start "
                             "P_S(W̃) included) rather than the last one (not in the paper: the penalty warm-up "
                             "can leave a better support behind)")

    def __post_init__(self) -> None:
        if not (self.rho > 0 and math.isfinite(self.rho)):
            raise ToolkitError(f"alps needs rho > 0 (the ADMM penalty), got {self.rho}; e.g. rho=0.1")
        if not self.rho_max >= self.rho:
            raise ToolkitError(f"alps needs rho_max ≥ rho = {self.rho:g}, got {self.rho_max:g}; e.g. rho_max=1e6")
        if self.max_iters < 1:
            raise ToolkitError(f"alps needs max_iters ≥ 1 ADMM iteration, got {self.max_iters}; e.g. max_iters=300")
        if self.update_every < 1 or self.min_iters < 0:
            raise ToolkitError(f"alps needs update_every ≥ 1 and min_iters ≥ 0, got {self.update_every} and "
                               f"{self.min_iters}")
        if self.pcg_iters < 0:
            raise ToolkitError(f"alps needs pcg_iters ≥ 0 (0 skips the refinement), got {self.pcg_iters}")
        if not (self.pcg_tol > 0 and self.support_tol >= 0):
            raise ToolkitError(f"alps needs pcg_tol > 0 and support_tol ≥ 0, got {self.pcg_tol} and {self.support_tol}")
        if not 0 <= self.damp_frac < 1e3:
            raise ToolkitError(f"alps needs damp_frac in [0, 1000), got {self.damp_frac}; e.g. damp_frac=0.01")


@dataclass
class Scaled:
    """The scaled problem: Ĝ = Q diag(lam) Qᵀ (in, in), W̃ and Y = W̃ Ĝ (out, in), s (in,), ‖W̃ X‖²."""

    G: Tensor
    Q: Tensor
    lam: Tensor
    W: Tensor
    Y: Tensor
    s: Tensor
    base: float
    dead: int
    inverse: tuple[float, Tensor] | None = None  # (ρ, (Ĝ + ρI)⁻¹) for the ρ of the last solve

    def shifted_solve(self, R: Tensor, rho: float) -> Tensor:
        """R (Ĝ + ρI)⁻¹ for R (out, in), with (Ĝ + ρI)⁻¹ = Q diag(1/(Λ + ρ)) Qᵀ formed once per ρ.

        ρ changes at most once per support check, so forming the inverse (in³) and one product per
        iteration (out·in²) costs less than two products with Q per iteration once out > in/update_every.
        """
        if self.inverse is None or self.inverse[0] != rho:
            self.inverse = (rho, (self.Q / (self.lam + rho)) @ self.Q.T)
        return R @ self.inverse[1]

    def error(self, A: Tensor, AG: Tensor | None = None) -> float:
        """‖(A − W̃) X‖/‖W̃ X‖ on the damped Gram; ``AG`` = A Ĝ when the caller has it."""
        AG = A @ self.G if AG is None else AG
        sq = float(((A - self.W) * (AG - self.Y)).sum())
        return math.sqrt(max(sq, 0.0) / self.base) if self.base > 0 else 0.0


def scale_problem(W: Tensor, gram: Tensor, damp_frac: float) -> Scaled:
    """Dead inputs zeroed, the Gram damped and scaled to unit diagonal, and Ĝ's eigendecomposition."""
    W, G = W.to(SOLVER_DTYPE).clone(), gram.to(W.device, SOLVER_DTYPE).clone()
    dead = torch.diagonal(G) <= 0
    G[dead, :], G[:, dead] = 0.0, 0.0  # an always-zero input has no correlation either (float noise aside)
    W[:, dead] = 0.0
    mean_diag = float(torch.diagonal(G).mean())
    G.diagonal().add_(damp_frac * (mean_diag if mean_diag > 0 else 1.0))
    G.diagonal()[dead] = 1.0
    s = torch.sqrt(torch.diagonal(G))  # (in,) all > 0 now
    G = G / s.unsqueeze(0) / s.unsqueeze(1)  # Ĝ, unit diagonal
    lam, Q = torch.linalg.eigh(G.to(EIGEN_DTYPE))
    Wt = W * s.unsqueeze(0)  # (out, in)
    Y = Wt @ G
    return Scaled(G=G, Q=Q.to(SOLVER_DTYPE), lam=lam.clamp_min(0.0).to(SOLVER_DTYPE), W=Wt, Y=Y, s=s,
                  base=float((Wt * Y).sum()), dead=int(dead.sum()))


def project(A: Tensor, target: Target) -> tuple[Tensor, Tensor]:
    """P_S(A): keep the largest |A| (whole matrix, or n of every m inputs of a row); (A ⊙ keep, keep).

    Unstructured on the CPU: the threshold is the ``count``-th smallest |A| by ``numpy.partition`` (about
    ten times faster than ``torch.kthvalue`` on a 576 × 576 matrix; ADMM projects every iteration). When
    ties at the threshold make ``|A| > threshold`` miss the exact count, the shared mask builder decides.
    """
    scores = A.abs()
    if isinstance(target, Unstructured) and scores.device.type == "cpu":
        count, numel = unstructured_count(target, scores.numel()), scores.numel()
        if 0 < count < numel:
            threshold = float(np.partition(scores.reshape(-1).numpy(), count - 1)[count - 1])
            keep = scores > threshold
            if numel - int(keep.sum()) == count:
                return A * keep, keep
    keep = keep_mask_from_scores(scores, target, group="matrix")
    return A * keep, keep


@dataclass
class RhoSchedule:
    """The penalty ρ and its update at each support check (module docstring)."""

    rho: float
    rho_max: float
    raised: bool = False

    def update(self, changed: int, kept: int) -> str:
        """New ρ from ``changed`` support entries of ``kept``; returns "go", "restart" or "stable"."""
        action = "go"
        factor = next((f for bound, f in RHO_STEPS if changed > bound * kept), None)
        if factor is not None:
            self.rho, self.raised = self.rho * factor, True
        elif self.raised:
            if changed == 0:
                return "stable"
            self.rho *= RHO_SLOW
        else:
            self.rho /= RHO_SHRINK
            action = "restart" if changed > 0 else "go"
        self.rho = min(self.rho, self.rho_max)
        return action


@dataclass
class AdmmOutcome:
    """The projected iterate ADMM returns, its keep-mask and error, iterations, final ρ and stop reason."""

    weight: Tensor
    keep: Tensor
    error: float
    step: int = 0  # the check it comes from (0 = the start P_S(W̃))
    iterations: int = 0
    rho: float = math.nan
    stop: str = "max_iters"
    restarts: int = 0

    def offer(self, weight: Tensor, keep: Tensor, error: float, step: int, keep_best: bool) -> None:
        """Take a projected iterate: always without ``keep_best``, else only when its error is lower."""
        if not keep_best or error < self.error:
            self.weight, self.keep, self.error, self.step = weight, keep, error, step


def admm(p: Scaled, target: Target, cfg: AlpsConfig, ctx: SolveContext) -> AdmmOutcome:
    """The ADMM loop with the ρ schedule and the support-stabilisation stop (module docstring)."""
    D0, keep0 = project(p.W, target)
    B, D, V, keep_last = p.W.clone(), D0.clone(), torch.zeros_like(p.W), keep0
    kept, norm = max(int(keep0.sum()), 1), float(torch.linalg.norm(p.W)) or 1.0
    schedule, out, checked = RhoSchedule(cfg.rho, cfg.rho_max), AdmmOutcome(D0, keep0, p.error(D0)), 0
    for i in range(1, cfg.max_iters + 1):
        ctx.check_cancel()
        rho, out.iterations = schedule.rho, i
        B = p.shifted_solve(p.Y - V + rho * D, rho)
        D_prev = D
        D, keep = project(B + V / rho, target)
        V += rho * (B - D)
        if i % cfg.update_every:
            continue
        changed, keep_last, checked = int((keep != keep_last).sum()), keep, i
        projected, projected_keep = project(B, target)
        error = p.error(projected)
        ctx.emit(SolverStep(layer=ctx.layer, name=ctx.name, solver="alps", step=i, objective=error,
                            values={"rho": rho, "primal": float(torch.linalg.norm(B - D)) / norm,
                                    "dual": rho * float(torch.linalg.norm(D - D_prev)) / norm,
                                    "support_change": changed / kept, "round": 0.0}))
        out.offer(projected, projected_keep, error, i, cfg.keep_best)
        action = schedule.update(changed, kept)
        if action == "stable" or (i >= cfg.min_iters and changed < cfg.support_tol * kept):
            out.stop = "support_stable"
            break
        if action == "restart":
            B, D, V, keep_last, out.restarts = p.W.clone(), D0.clone(), torch.zeros_like(p.W), keep0, out.restarts + 1
    if checked != out.iterations:  # max_iters fell between two checks: the last iterate is a candidate too
        projected, projected_keep = project(B, target)
        out.offer(projected, projected_keep, p.error(projected), out.iterations, cfg.keep_best)
    out.rho = schedule.rho
    return out


def pcg(p: Scaled, X: Tensor, keep: Tensor, cfg: AlpsConfig, ctx: SolveContext, offset: int) -> tuple[Tensor, int]:
    """Batched CG on every row's restricted normal equations [X Ĝ]_S = Y_S from X (zero off the support).

    Ĝ has unit diagonal, so the Jacobi preconditioner diag(Ĝ)⁻¹ is the identity (it was applied as
    the scaling s). Rows whose residual is already zero take no step (α = 0). Returns (X, steps).
    """
    mask = keep.to(SOLVER_DTYPE)
    XG = X @ p.G
    R = (p.Y - XG) * mask  # (out, in)
    goal = cfg.pcg_tol * torch.linalg.norm(p.Y * mask, dim=1)  # (out,)
    P, rz = R.clone(), (R * R).sum(1)
    steps = 0
    for _ in range(cfg.pcg_iters):
        if bool((torch.linalg.norm(R, dim=1) <= goal).all()):
            break
        ctx.check_cancel()
        steps += 1
        PG = P @ p.G
        AP = PG * mask
        curv = (P * AP).sum(1)
        alpha = torch.where(curv > 0, rz / torch.where(curv > 0, curv, 1.0), 0.0).unsqueeze(1)  # (out, 1)
        X, XG, R = X + alpha * P, XG + alpha * PG, R - alpha * AP
        rz_new = (R * R).sum(1)
        beta = torch.where(rz > 0, rz_new / torch.where(rz > 0, rz, 1.0), 0.0).unsqueeze(1)
        P, rz = R + beta * P, rz_new
        ctx.emit(SolverStep(layer=ctx.layer, name=ctx.name, solver="alps", step=offset + steps,
                            objective=p.error(X, XG),
                            values={"residual": float(torch.linalg.norm(R)) / (float(torch.linalg.norm(p.Y)) or 1.0),
                                    "round": 1.0}))
    return X, steps


def prune(W: Tensor, stats: LinearStats, target: Target | None, cfg: AlpsConfig, ctx: SolveContext) -> PruneResult:
    """ALPS for one linear: W (out, in) float32 → pruned Ŵ (out, in) float32 and its keep-mask.

    Needs ``stats.gram``. Emits SolverSteps (module docstring); ``info`` holds the ADMM iterations,
    restarts, final ρ, stop reason, PCG steps, dead inputs and the relative errors (damped Gram) after
    ADMM and after PCG. Does not modify W or the statistics. Raises ToolkitError for a structured
    target or an n:m width mismatch, NumericalError for non-finite statistics.
    """
    assert target is not None, "a pruning method always gets a sparsity target (MethodSpec.check)"
    if not isinstance(target, Unstructured | NM):
        raise ToolkitError(f"alps supports unstructured and n:m targets, not {target}; try wanda or sparsegpt")
    validate_for_shape(target, (W.shape[0], W.shape[1]))
    if not bool(stats.gram.isfinite().all()):
        raise NumericalError(f"{ctx.name}: stats.gram has non-finite entries; check the calibration inputs "
                             "(overflow in half precision?) before running alps")
    p = scale_problem(W, stats.gram, cfg.damp_frac)
    if p.dead:
        ctx.warn(f"alps: {p.dead} of {W.shape[1]} inputs of this linear are always zero; their weights are "
                 "pruned first and the Gram is damped there")
    out = admm(p, target, cfg, ctx)
    X, steps = pcg(p, out.weight, out.keep, cfg, ctx, out.iterations)
    weight = (X * out.keep) / p.s.unsqueeze(0)
    if not bool(weight.isfinite().all()):
        raise NumericalError(f"{ctx.name}: alps produced non-finite weights; raise damp_frac (now {cfg.damp_frac:g})")
    info = {"admm_iters": out.iterations, "restarts": out.restarts, "rho_final": out.rho, "stop_reason": out.stop,
            "pcg_steps": steps, "dead_inputs": p.dead, "chosen_step": out.step, "admm_error": out.error,
            "final_error": p.error(X * out.keep)}
    return PruneResult(weight=weight, keep_mask=out.keep, damping=cfg.damp_frac, info=info)


SPEC = MethodSpec(
    name="alps",
    fn=prune,
    config=AlpsConfig,
    needs=frozenset({Stat.GRAM}),
    targets=(Unstructured, NM),
    summary="ADMM with a rising penalty until the support settles, then conjugate gradient on that support",
)
