"""AWP's step size: the paper's η = scale/‖C‖_F, the spectral step 1/L, a Jacobi step, an Armijo line search.

Objective and scaling. ``run_pgd`` steps Z = Θ + η G with G = (W − Θ)C = −½∇f, f(Θ) = tr((W − Θ)C(W − Θ)ᵀ).
∇f = −2(W − Θ)C is Lipschitz with L = 2‖C‖₂ (‖·‖₂ the largest eigenvalue of the PSD C), so the textbook
projected-gradient step 1/L on f is Θ − ∇f/L = Θ + G/‖C‖₂: in this parametrisation the spectral step is
η = 1/‖C‖₂ (``spectral_scale`` = 1). For that step the quadratic upper bound of f at Θ is exactly
minimised over a fixed constraint set by Proj(Z), which is the classical descent guarantee of iterative
hard thresholding; without constraints η ∈ (0, 2/‖C‖₂) converges and η = 1/‖C‖₂ contracts every
eigen-direction by 1 − λ/‖C‖₂. The paper's η = 1.5/‖C‖_F is smaller whenever ‖C‖_F > 1.5‖C‖₂: the
directions with small eigenvalues then contract by only 1 − 1.5λ/‖C‖_F per step.

‖C‖₂ comes from ``power_iters`` power iterations (one (in, in) matrix-vector product each) started from
√diag(C); the Rayleigh quotient is ≤ ‖C‖₂, so the estimate errs towards a slightly larger η.

``jacobi`` (ours, not in the paper): a step per input, Z = Θ + η G D⁻¹ with D = diag(C). It is the
spectral step of the same f in the scaled variables Θ̃ = Θ D^½, where f = tr((W̃ − Θ̃) C̃ (W̃ − Θ̃)ᵀ) with
C̃ = D^-½ C D^-½ (unit diagonal), so η = spectral_scale/‖C̃‖₂. Where one direction carries C's energy
(measured on smollm2: ‖C‖_F ≈ ‖C‖₂) the unscaled step moves weight j by η·C_jj ≈ 0.4 % of the way to its
own optimum; this step moves it by η·1 of the way, as GPTQ's per-column update does in effect. The
projection is the same nearest-grid / top-k projection in the unscaled weights. Dead inputs (C_jj = 0)
get no step.

``backtracking`` (Armijo, projected): at step t the trial steps are η₀, βη₀, β²η₀, … (β = ``shrink``);
the first whose projected iterate Θ⁺ = Proj(Θ + ηG) satisfies the sufficient decrease

    f(Θ⁺) ≤ f(Θ) − σ ‖Θ⁺ − Θ‖²_F / η

is taken. η₀ is min(2 η_{t−1}, 2/‖C‖₂) (the first: 2/‖C‖₂). When a trial leaves Θ unchanged, or no
trial out of ``max_trials`` decreases f, the iterate is stationary for this rule and the loop stops
(``stalled``). Accepted steps strictly decrease f, so the trace is monotone. While the constraint set
still changes (the joint schedule's sparsity ramp and the first quantizing step), f must be allowed
to grow, so those steps use the fixed spectral step instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from toolkit.methods.awp_projection import Iterate, Projector

STEPS = ("paper", "spectral", "jacobi", "backtracking")
STOPS = ("fixed", "gradient")
GRADIENT_STOP_ITERS = 200  # the paper's pruning cap, used by stop=gradient unless iterations is given


def spectral_norm(C: Tensor, iters: int) -> float:
    """Largest eigenvalue of the symmetric PSD ``C`` by ``iters`` power iterations (Rayleigh quotient).

    Starts from √diag(C) (all ones when the diagonal is zero); 0 for C = 0. Never above the true value.
    """
    v = torch.diagonal(C).clamp_min(0).sqrt()
    if not float(torch.linalg.norm(v)) > 0:
        v = torch.ones(C.shape[0], dtype=C.dtype, device=C.device)
    v = v / torch.linalg.norm(v)
    for _ in range(iters):
        w = C @ v
        norm = float(torch.linalg.norm(w))
        if not norm > 0:
            return 0.0
        v = w / norm
    return max(float(torch.dot(v, C @ v)), 0.0)


class Quadratic(Protocol):
    """What a step needs of the problem (:class:`toolkit.methods.awp_solver.Quadratic`)."""

    def residual(self, theta: Tensor) -> tuple[Tensor, float]:
        """(G, relative error) at Θ."""
        ...

    def loss(self, objective: float) -> float:
        """The loss f from the relative error."""
        ...


@dataclass
class Trial:
    """An accepted step: the projected iterate, Z, its residual G, its relative error and the η taken."""

    iterate: Iterate
    Z: Tensor
    G: Tensor
    objective: float
    eta: float


@dataclass
class Stepper:
    """η for every step of one linear: ``kind`` paper | spectral (fixed ``eta``) or backtracking.

    ``eta``: the fixed step, or for backtracking the fixed step of the unsettled phases; ``first``: the
    largest trial step of the line search (2/‖C‖₂); ``settled_from``: the first step whose constraint
    set equals the previous step's (line search from there on).
    """

    kind: str
    eta: float
    first: float = 0.0
    settled_from: int = 1
    sigma: float = 1e-4
    shrink: float = 0.5
    max_trials: int = 30
    precond: Tensor | None = None  # (in,) per-input factor on G (jacobi: 1/C_jj, 0 for dead inputs)
    evaluations: int = 0  # residuals computed (each one (out, in) × (in, in) matmul)
    last: float = field(default=0.0)

    def step(self, q: Quadratic, it: Iterate, G: Tensor, objective: float, project: Projector, t: int
             ) -> Trial | None:
        """The step from Θ^(t−1) = ``it``; None when the line search finds no decrease (stalled)."""
        if self.kind != "backtracking" or t < self.settled_from:
            return self._take(q, it, G, project, t, self.eta)
        eta = min(2.0 * self.last, self.first) if self.last > 0 else self.first
        loss = q.loss(objective)
        for _ in range(self.max_trials):
            trial = self._take(q, it, G, project, t, eta)
            moved = float(torch.sum((trial.iterate.theta - it.theta) ** 2))
            if moved == 0.0:
                return None
            if math.isfinite(trial.objective) and q.loss(trial.objective) <= loss - self.sigma * moved / eta:
                self.last = eta
                return trial
            eta *= self.shrink
        return None

    def _take(self, q: Quadratic, it: Iterate, G: Tensor, project: Projector, t: int, eta: float) -> Trial:
        step = G if self.precond is None else G * self.precond
        Z = it.theta + eta * step  # not torch.add(alpha=η): fused rounding changes Θ by ~1e-7
        new = project(Z, t, it)
        G_new, objective = q.residual(new.theta)
        self.evaluations += 1
        return Trial(new, Z, G_new, objective, eta)


def settled_from(project: Projector) -> int:
    """First step whose projection uses the same constraint set as the step before (see the docstring)."""
    if project.target is None:
        return 1
    if project.spec is None:
        return project.ramp + 1
    return max(project.quant_from + 1, project.ramp + 1)


def make_stepper(kind: str, c_fro: float, c_spec: float, paper_scale: float, spectral_scale: float,
                 project: Projector) -> Stepper:
    """The stepper of ``kind`` for C with ‖C‖_F = ``c_fro`` and ‖C‖₂ ≈ ``c_spec`` (both > 0)."""
    if kind == "paper":
        return Stepper("paper", paper_scale / c_fro)
    spectral = spectral_scale / c_spec
    if kind == "spectral":
        return Stepper("spectral", spectral)
    return Stepper("backtracking", spectral, first=2.0 / c_spec, settled_from=settled_from(project))


def jacobi_stepper(C: Tensor, spectral_scale: float, power_iters: int) -> tuple[Stepper, float]:
    """The ``jacobi`` stepper for C: η = spectral_scale/‖C̃‖₂ on G D⁻¹, C̃ = D^-½ C D^-½; and ‖C̃‖₂.

    ‖C̃‖₂ by ``power_iters`` power iterations on the scaled copy (one (in, in) product, once per linear).
    """
    diag = torch.diagonal(C)
    live = diag > 0
    inv_sqrt = torch.where(live, diag.clamp_min(torch.finfo(C.dtype).tiny).rsqrt(), torch.zeros_like(diag))
    scaled_norm = spectral_norm(C * inv_sqrt.unsqueeze(0) * inv_sqrt.unsqueeze(1), power_iters)
    eta = spectral_scale / scaled_norm if scaled_norm > 0 else 0.0
    return Stepper("jacobi", eta, precond=inv_sqrt**2), scaled_norm
