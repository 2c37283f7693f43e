"""Compensation of o_proj / down_proj after input channels are removed (Numerical Pruning §3.4, FLAP).

Paper layout: Y = X W with W ∈ R^{D×D'} (D inputs), so HF's ``weight`` (out, in) is Wᵀ. Removing the
input channels P (keeping K), Theorem 3 (Eq. 11) gives the update that keeps the output closest:

    δW* = −(2XᵀX)⁻¹ M_p (M_pᵀ (2XᵀX)⁻¹ M_p)⁻¹ M_pᵀ W          (rows P of W + δW* are exactly 0)

By the block-inverse identity its kept rows are the least-squares fit of the dense output on the
kept inputs, W_K + δW_K = W_K + (G_KK + γI)⁻¹ G_KP W_P, with G = XᵀX/N and the damping of Remark 5,
γ = ``damp_frac``·mean(diag G) (the 2 cancels). In HF layout, one Cholesky of the |K|×|K| block:

    W'[:, K] = W[:, K] + W[:, P] G_PK (G_KK + γI)⁻¹ ,   W'[:, P] = 0     (γ from diag of the full G)

FLAP's bias compensation instead moves the removed inputs' mean contribution into the bias:
b' = b + W[:, P] μ_P with μ the mean input. Errors are computed from the statistics:
‖(W' − W)x + Δb‖² averaged over tokens = tr(ΔW G ΔWᵀ) + 2 Δbᵀ ΔW μ + ‖Δb‖².
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from toolkit.errors import NumericalError
from toolkit.methods.block.base import InputStats

SOLVE_DTYPE = torch.float64  # Gram solves of the scores and the compensation (D up to ~30k)
MAX_TRIES = 6  # damping escalations (×10 each) before a NumericalError


def damping_scale(M: Tensor) -> float:
    """mean(diag M), or 1 when it is not positive: what damping fractions multiply."""
    mean_diag = float(torch.diagonal(M).mean()) if M.numel() else 1.0
    return mean_diag if mean_diag > 0 else 1.0


def with_damping(M: Tensor, damp: float, scale: float | None = None) -> Tensor:
    """M + damp·scale·I in float64; ``scale`` defaults to :func:`damping_scale` (M)."""
    M = M.to(SOLVE_DTYPE)
    scale = damping_scale(M) if scale is None else scale
    return M + damp * scale * torch.eye(M.shape[0], dtype=SOLVE_DTYPE, device=M.device)


def damped_cholesky(
    M: Tensor, damp_frac: float, warn: Callable[[str], None], what: str, scale: float | None = None
) -> tuple[Tensor, float]:
    """Lower Cholesky factor of :func:`with_damping` (M, δ, scale), δ from ``damp_frac`` escalating ×10 (R12).

    Returns ``(L, δ)``; emits a warning per escalation; raises :class:`NumericalError` after
    ``MAX_TRIES`` or on non-finite entries.
    """
    if not bool(torch.isfinite(M).all()):
        raise NumericalError(f"{what}: the statistics have non-finite entries; check the inputs")
    damp = damp_frac
    for attempt in range(MAX_TRIES):
        L, info = torch.linalg.cholesky_ex(with_damping(M, damp, scale))
        if int(info) == 0:
            return L, damp
        if attempt + 1 < MAX_TRIES:
            nxt = damp * 10 if damp > 0 else 1e-6
            warn(f"{what}: Cholesky failed at damping {damp:g}; retrying with {nxt:g}")
            damp = nxt
    raise NumericalError(f"{what}: Cholesky failed even at damping {damp:g}; increase damp_frac or nsamples")


def least_squares_update(
    W: Tensor, stats: InputStats, keep: Tensor, damp_frac: float, warn: Callable[[str], None]
) -> tuple[Tensor, float]:
    """Theorem 3 in HF layout: ``W`` (out, in), ``keep`` (in,) bool → (W' (out, in) float32, γ-fraction).

    W' is zero on the removed columns and the damped least-squares refit on the kept ones. Nothing
    is removed → ``W`` unchanged. Does not mutate ``W``.
    """
    removed = ~keep
    if not bool(removed.any()):
        return W.clone(), 0.0
    K, P = torch.nonzero(keep).flatten(), torch.nonzero(removed).flatten()
    G = stats.gram.to(SOLVE_DTYPE)
    L, damp = damped_cholesky(G[K][:, K], damp_frac, warn, "compensation", damping_scale(G))
    M = torch.cholesky_solve(G[K][:, P], L)  # (|K|, |P|) = (G_KK + γI)⁻¹ G_KP
    Wd = W.to(SOLVE_DTYPE)
    out = torch.zeros_like(Wd)
    out[:, K] = Wd[:, K] + Wd[:, P] @ M.T  # (out, |K|)
    return out.to(W.dtype), damp


def eq11_update(W: Tensor, gram: Tensor, keep: Tensor, gamma: float) -> Tensor:
    """Eq. 11 literally (reference for tests): W + δW*ᵀ with δW* = −G⁻¹M_p(M_pᵀG⁻¹M_p)⁻¹M_pᵀWᵀ.

    ``gram`` is G = XᵀX/N, ``gamma`` the absolute damping added to its diagonal.
    """
    G = gram.to(SOLVE_DTYPE) + gamma * torch.eye(gram.shape[0], dtype=SOLVE_DTYPE)
    Ginv = torch.linalg.inv(G)
    P = torch.nonzero(~keep).flatten()
    Wp = W.to(SOLVE_DTYPE).T  # paper layout (in, out)
    delta = -Ginv[:, P] @ torch.linalg.solve(Ginv[P][:, P], Wp[P])
    return (Wp + delta).T.to(W.dtype)


def bias_update(W: Tensor, stats: InputStats, keep: Tensor) -> Tensor:
    """FLAP's bias compensation Δb = W[:, P] μ_P (out,): the removed inputs' mean output."""
    removed = ~keep
    return (W[:, removed].to(SOLVE_DTYPE) @ stats.mean[removed].to(SOLVE_DTYPE)).to(W.dtype)


def output_error(W: Tensor, W_new: Tensor, stats: InputStats, bias_delta: Tensor | None = None) -> float:
    """Relative output error ‖(W' − W)x + Δb‖ / ‖W x‖ over the calibration tokens, from G and μ."""
    G = stats.gram.to(SOLVE_DTYPE)
    Wd = W.to(SOLVE_DTYPE)
    dW = W_new.to(SOLVE_DTYPE) - Wd
    err = float(((dW @ G) * dW).sum())
    if bias_delta is not None:
        db = bias_delta.to(SOLVE_DTYPE)
        err += 2 * float(db @ (dW @ stats.mean.to(SOLVE_DTYPE))) + float(db @ db)
    base = float(((Wd @ G) * Wd).sum())
    return math.sqrt(max(err, 0.0) / base) if base > 0 else 0.0


def augmented(W: Tensor, bias: Tensor | None, stats: InputStats) -> tuple[Tensor, InputStats]:
    """[W, b] (out, in+1) and the statistics of [x, 1]: G' = [[G, μ], [μᵀ, 1]], μ' = [μ, 1]."""
    b = torch.zeros(W.shape[0], dtype=W.dtype, device=W.device) if bias is None else bias.to(W.dtype)
    one = torch.ones(1, dtype=stats.gram.dtype, device=stats.gram.device)
    gram = torch.cat([torch.cat([stats.gram, stats.mean.unsqueeze(1)], 1),
                      torch.cat([stats.mean, one]).unsqueeze(0)], 0)
    return torch.cat([W, b.unsqueeze(1)], 1), InputStats(gram, torch.cat([stats.mean, one]), stats.count)


def compensate(
    W: Tensor, stats: InputStats, keep: Tensor, method: str, damp_frac: float, warn: Callable[[str], None]
) -> tuple[Tensor, Tensor | None, float]:
    """New (out, in) weight (zero on removed inputs), bias change or None, damping, for ``method``.

    ``least_squares``: Theorem 3 (:func:`least_squares_update`); ``least_squares_bias``: Theorem 3
    with a constant input appended (the bias is refit with the kept weights: the least-squares
    optimum over weights and bias, never worse than either alone); ``bias``: FLAP's
    :func:`bias_update` with the weight masked; ``none``: the weight masked.
    """
    if method == "least_squares":
        W_new, damp = least_squares_update(W, stats, keep, damp_frac, warn)
        return W_new, None, damp
    if method == "least_squares_bias":
        W_aug, stats_aug = augmented(W, None, stats)
        keep_aug = torch.cat([keep, torch.ones(1, dtype=torch.bool, device=keep.device)])
        new, damp = least_squares_update(W_aug, stats_aug, keep_aug, damp_frac, warn)
        return new[:, :-1].contiguous(), new[:, -1].contiguous(), damp
    masked = W * keep.to(W.dtype).unsqueeze(0)
    if method == "bias":
        return masked, bias_update(W, stats, keep), math.nan
    return masked, None, math.nan
