"""The numerical core of FISTAPruner: the per-linear quadratic in Gram form, FISTA, rounding.

Paper: Zhao et al., arXiv:2408.03728v1, Eq. (4)-(8). Shapes: W, A, D, R are (out, in); G, C, Gd,
M are (in, in); all float32 except the error scalars, which are accumulated in float64.

Statistics are means over the N calibration tokens (x the dense-layer input of this linear, x*
the input it receives in the partly pruned layer):

    G  = Σ x* x*ᵀ / N      C = Σ x* xᵀ / N      Gd = Σ x xᵀ / N

For a candidate A (the paper's W*) and D = A − W the reconstruction objective is

    f(A) = ½‖A X* − W X‖²_F / N = ½tr(A G Aᵀ) − tr(A C Wᵀ) + ½tr(W Gd Wᵀ)
         = f(W) + ⟨D, R⟩ + ½⟨D G, D⟩,          R = W G − W Cᵀ = ∇f(W)
    f(W) = ½tr(W M Wᵀ),   M = G − C − Cᵀ + Gd = Σ (x* − x)(x* − x)ᵀ / N
    ∇f(A) = A G − W Cᵀ = D G + R

Working with D instead of A keeps every term error-sized, so E_round (a difference of two close
norms, Eq. 9) does not drown in the cancellation of ½tr(A G Aᵀ) against ½tr(W Gd Wᵀ). Without
error correction C = Gd = G, so R = 0 and f(W) = 0.

The error the paper writes, ‖A X* − W X‖_F, is √(2 N f(A)); this module reports the per-token
E(A) = √(2 f(A)). Ratios (E_round/E_total, the relative improvement E_stop) do not depend on the
√N factor. Everything runs on the device of W: the solver is device-local.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from toolkit.methods.masks import keep_mask_from_scores, nm_violations
from toolkit.spec.targets import NM, Target, Unstructured, unstructured_count

POWER_ITERS = 100  # power-iteration steps for λ_max(G) when eigvalsh is not wanted
POWER_PAD = 1.01  # power iteration under-estimates λ_max; a step 1/L must not exceed 1/λ_max

StepTrace = Callable[[int, float, float], None]  # (iteration, objective, ‖x_k − x_{k−1}‖_F)


@dataclass(frozen=True)
class Quadratic:
    """f(A) = f(W) + ⟨A − W, R⟩ + ½⟨(A − W) G, A − W⟩ for one linear (see the module docstring)."""

    W: Tensor  # (out, in) dense weight
    G: Tensor  # (in, in) Gram of the pruned-path inputs
    R: Tensor  # (out, in) ∇f(W) = W (G − Cᵀ); zero without error correction
    f_dense: float  # f(W) = ½ tr(W M Wᵀ)
    out_sq: float  # ‖W X‖²_F / N = tr(W Gd Wᵀ), the scale of relative errors
    L: float  # Lipschitz constant of ∇f: λ_max(G)

    def value(self, D: Tensor, DG: Tensor) -> float:
        """f(W + D) given D (out, in) and D G (out, in); float64 accumulation."""
        linear = torch.sum(D * self.R, dtype=torch.float64)
        quadratic = 0.5 * torch.sum(DG * D, dtype=torch.float64)
        return max(self.f_dense + float(linear + quadratic), 0.0)

    def error(self, A: Tensor, DG: Tensor | None = None) -> float:
        """Per-token output error E(A) = ‖A X* − W X‖_F / √N; pass ``DG`` = (A − W) G if known."""
        D = A - self.W
        return math.sqrt(2.0 * self.value(D, D @ self.G if DG is None else DG))

    def relative(self, error: float) -> float:
        """E(A) / (‖W X‖_F / √N), or E(A) itself when the dense output is zero."""
        return error / math.sqrt(self.out_sq) if self.out_sq > 0 else error


def lipschitz(G: Tensor, method: str = "eigvalsh") -> float:
    """λ_max(G) for symmetric PSD G (in, in): exact ``eigvalsh`` or padded ``power`` iteration."""
    if method == "eigvalsh":
        return max(float(torch.linalg.eigvalsh(G)[-1]), 0.0)
    generator = torch.Generator().manual_seed(0)  # deterministic start vector
    v = torch.randn(G.shape[0], 1, generator=generator, dtype=G.dtype).to(G.device)
    for _ in range(POWER_ITERS):
        Gv = G @ v
        norm = torch.linalg.vector_norm(Gv)
        if float(norm) == 0.0:
            return 0.0
        v = Gv / norm
    return max(float((v.T @ G @ v).squeeze()) * POWER_PAD, 0.0)


def build_quadratic(W: Tensor, G: Tensor, C: Tensor | None, Gd: Tensor | None, method: str) -> Quadratic:
    """The quadratic of one linear from its statistics; ``C``/``Gd`` None = no error correction.

    W (out, in) and the (in, in) statistics must share a device; W is not modified.
    """
    Wd = W.double()
    if C is None or Gd is None:
        R = torch.zeros_like(W)
        f_dense = 0.0
        out_sq = float(torch.sum((Wd @ G.double()) * Wd))
    else:
        M = G.double() - C.double() - C.double().T + Gd.double()  # Σ (x*−x)(x*−x)ᵀ / N
        f_dense = max(0.5 * float(torch.sum((Wd @ M) * Wd)), 0.0)
        R = W @ (G - C.T)  # (out, in)
        out_sq = float(torch.sum((Wd @ Gd.double()) * Wd))
    return Quadratic(W=W, G=G, R=R, f_dense=f_dense, out_sq=max(out_sq, 0.0), L=lipschitz(G, method))


def soft_threshold(A: Tensor, rho: float) -> Tensor:
    """SoftShrinkage_ρ (Eq. 5b): sign(a)·max(|a| − ρ, 0) elementwise, the prox of ρ‖·‖₁.

    >>> soft_threshold(torch.tensor([-3.0, -1.0, 0.5, 2.0]), 1.0).tolist()
    [-2.0, -0.0, 0.0, 1.0]
    """
    return F.softshrink(A, rho)


def round_to_target(A: Tensor, target: Target, group: str = "matrix") -> tuple[Tensor, Tensor]:
    """Rounding step (Eq. 8): zero the smallest |A| to meet ``target``; returns (weight, keep_mask).

    Unstructured: the ⌊s·numel⌋ smallest |A_ij| of the whole matrix (``group="matrix"``, the
    paper) or ⌊s·in⌋ per output row (``group="row"``). n:m: keep the n largest |A| of every m
    consecutive inputs of a row. Entries FISTA already zeroed stay zero (the result may be
    sparser than the target, as the paper's rounding never re-densifies).
    """
    keep = keep_mask_from_scores(A.abs(), target, group=group)
    return A * keep, keep


def meets_target(keep_mask: Tensor, target: Target) -> bool:
    """True if ``keep_mask`` (out, in) has the pattern of ``target``.

    n:m needs no group with more than n kept. Unstructured needs at least min(⌊s·numel⌋,
    out·⌊s·in⌋) zeros, so per-row selections (Wanda) pass too.
    """
    if isinstance(target, NM):
        return nm_violations(keep_mask, target) == 0
    assert isinstance(target, Unstructured)
    rows, cols = keep_mask.shape
    needed = min(unstructured_count(target, keep_mask.numel()), rows * int(cols * target.sparsity))
    return int((~keep_mask).sum()) >= needed


@dataclass(frozen=True)
class InnerSettings:
    """How one FISTA call runs: K iterations, Eq. (7) tolerance, momentum rule, trace period."""

    iters: int = 20
    tol: float = 1e-6
    momentum: str = "standard"  # "standard" (Beck-Teboulle) or "paper" (literal Eq. 5d)
    trace_every: int = 0  # call the trace every this many iterations; 0 = never


@dataclass(frozen=True)
class FistaOutput:
    """Result of one FISTA call: the last prox iterate x_K, its D·G, and iterations run."""

    x: Tensor  # (out, in)
    xG: Tensor  # (out, in) (x − W) G
    iterations: int


def fista(q: Quadratic, start: Tensor, rho: float, settings: InnerSettings, trace: StepTrace | None = None
          ) -> FistaOutput:
    """FISTA (Beck & Teboulle 2009) on min_A f(A) + ρL‖A‖₁ with step 1/L (Eq. 5a-5d).

    x_k = S_ρ(y_k − (D_y G + R)/L),  t_{k+1} = (1 + √(1 + 4t_k²))/2,
    y_{k+1} = x_k + ((t_k − 1)/t_{k+1})(x_k − a),  a = x_{k−1} ("standard") or y_k ("paper",
    the literal Eq. 5d). Stops after ``settings.iters`` steps or when ‖x_k − x_{k−1}‖_F <
    ``settings.tol`` (Eq. 7) and returns the prox iterate x_K (exactly sparse). One
    (out, in)×(in, in) matmul per step: D_y G follows from D_x G by the same linear recurrence as
    y. ``trace(k, f(x) + ρL‖x‖₁, step)`` is called every ``settings.trace_every`` steps (0 =
    never). ``start`` (out, in) is not modified.
    """
    iters, tol, trace_every = settings.iters, settings.tol, settings.trace_every
    x_prev = start
    xG_prev = (start - q.W) @ q.G  # (out, in)
    y, yG = x_prev, xG_prev
    t = 1.0
    step_norm = math.inf
    k = 0
    for k in range(iters):
        x = soft_threshold(y - (yG + q.R) / q.L, rho)
        D = x - q.W
        xG = D @ q.G
        t_next = (1.0 + math.sqrt(1.0 + 4.0 * t * t)) / 2.0
        beta = (t - 1.0) / t_next
        anchor, anchorG = (x_prev, xG_prev) if settings.momentum == "standard" else (y, yG)
        y, yG = x + beta * (x - anchor), xG + beta * (xG - anchorG)
        step_norm = float(torch.linalg.vector_norm(x - x_prev))
        if trace is not None and trace_every > 0 and k % trace_every == 0:
            l1 = float(torch.sum(x.abs(), dtype=torch.float64))
            trace(k, q.value(D, xG) + rho * q.L * l1, step_norm)
        x_prev, xG_prev, t = x, xG, t_next
        if step_norm < tol:
            break
    return FistaOutput(x=x_prev, xG=xG_prev, iterations=k + 1)


def zero_fraction(A: Tensor) -> float:
    """Fraction of exact zeros in A."""
    return float((A == 0).sum()) / max(A.numel(), 1)


__all__ = [
    "FistaOutput", "InnerSettings", "Quadratic", "build_quadratic", "fista", "lipschitz", "meets_target",
    "round_to_target", "soft_threshold", "zero_fraction",
]
