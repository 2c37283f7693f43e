"""The upper Cholesky factor of a damped inverse Hessian, as the OBS sweeps (SparseGPT, Thanos) read it.

SparseGPT and Thanos need U, upper-triangular with UᵀU = Ĥ⁻¹ (Ĥ = H + δ·mean(diag H)·I): row i of U
gives the OBS quantities of the columns to its right. The reference route (``base.damped_cholesky_inverse``)
factors Ĥ, forms Ĥ⁻¹ from the factor and factors that again: n³/3 + 2n³/3 + n³/3 = 4n³/3 flops.

Here the reversed matrix is factored instead. With J the reversal permutation and JĤJ = L̃L̃ᵀ (lower
Cholesky), Ĥ = R Rᵀ with R = J L̃ J upper-triangular, so Ĥ⁻¹ = R⁻ᵀR⁻¹ and U = R⁻¹ = J L̃⁻¹ J: upper, with a
positive diagonal, hence the same unique factor. One Cholesky (n³/3) and one triangular inverse, computed by
halves, [[A, 0], [C, D]]⁻¹ = [[A⁻¹, 0], [−D⁻¹CA⁻¹, D⁻¹]], whose products are plain matrix products (cache-
blocked BLAS-3, ≈ 2n³/3 flops as dense products) down to :data:`LEAF` columns, solved as triangular
systems. Ĥ⁻¹ is never formed. The result equals the reference route's to float32 rounding, not bit for bit.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from toolkit.errors import NumericalError
from toolkit.methods.base import SolveContext

LEAF = 256  # columns below which the triangular inverse is one triangular solve


def lower_inverse(L: Tensor) -> Tensor:
    """L⁻¹ for lower-triangular, invertible L (n, n), by recursive halving; lower-triangular."""
    n = L.shape[0]
    if n <= LEAF:
        eye = torch.eye(n, dtype=L.dtype, device=L.device)
        return torch.linalg.solve_triangular(L, eye, upper=False)
    h = n // 2
    out = torch.zeros_like(L)
    A_inv = lower_inverse(L[:h, :h])
    D_inv = lower_inverse(L[h:, h:])
    out[:h, :h] = A_inv
    out[h:, h:] = D_inv
    out[h:, :h] = -(D_inv @ (L[h:, :h] @ A_inv))
    return out


def upper_inverse_factor(H: Tensor, shift: float) -> Tensor | None:
    """U (n, n) upper-triangular with UᵀU = (H + shift·I)⁻¹, or None when H + shift·I is not positive definite."""
    reversed_h = H.flip(0, 1)  # a copy: J H J
    reversed_h.diagonal().add_(shift)
    L, info = torch.linalg.cholesky_ex(reversed_h)
    del reversed_h
    if int(info) != 0:
        return None
    U = lower_inverse(L).flip(0, 1)
    return U if bool(torch.isfinite(U).all()) else None


def damped_inverse_factor(H: Tensor, damp_frac: float, ctx: SolveContext, max_tries: int = 6) -> tuple[Tensor, float]:
    """``(U, damping)``: U upper-triangular with UᵀU = (H + δ·mean(diag H)·I)⁻¹, δ escalating ×10 on failure.

    The same contract as ``base.damped_cholesky_inverse`` (a Warning event per escalation,
    :class:`NumericalError` after ``max_tries``; dead inputs are the caller's), by the cheaper route above.
    """
    mean_diag = torch.mean(torch.diagonal(H)).item()
    if not math.isfinite(mean_diag):
        raise NumericalError(f"{ctx.name}: the Hessian has non-finite entries; check the inputs")
    scale = mean_diag if mean_diag > 0 else 1.0
    damp = damp_frac
    for attempt in range(max_tries):
        U = upper_inverse_factor(H, damp * scale)
        if U is not None:
            return U, damp
        if attempt + 1 < max_tries:
            nxt = damp * 10 if damp > 0 else 1e-4
            ctx.warn(f"Cholesky failed at damping {damp:g}; retrying with {nxt:g}")
            damp = nxt
    raise NumericalError(
        f"{ctx.name}: Cholesky failed even at damping {damp:g}; increase damp_frac or nsamples"
    )
