"""The projected-gradient loop of AWP (Algorithm 1 of Liu et al. 2025) in Gram form.

With C = XXᵀ/N (in, in) and the residual G = (W − Θ)C (= −½∇f1, eq. 9)::

    Z^(t)   = Θ^(t) + η (W − Θ^(t)) C
    Θ^(t+1) = Proj_𝒞(Z^(t))

The objective reported at every step is the scale-free relative output error
‖(W − Θ)C^½‖_F / ‖W C^½‖_F = √(⟨G, W − Θ⟩ / ⟨WC, W⟩) (the same quantity as the engine's
``rel_error``; notes A19). C^½ is never formed. Per step the cost is one (out, in) × (in, in) matmul.

Stop rules (notes A5): ``full_grad`` ‖2G‖_F/‖W‖_F < tol (the paper's wording, C normalised by the
token count as here), ``masked_grad`` the same restricted to the kept weights, ``rel_change``
‖Θ^(t+1) − Θ^(t)‖_F/‖W‖_F < tol, ``none``. Divergence (a non-finite objective or one above
``diverge``) stops the loop with a warning and returns the best feasible iterate seen (or the last
finite one, projected into the constraint set): never a silent NaN.

η per step comes from a :class:`~toolkit.methods.awp_step.Stepper` (fixed, or an Armijo line search that
stops the loop as ``stalled`` when no trial step decreases f). When only quantizing with a fixed η, an
iterate equal to its predecessor repeats forever: the loop stops there (``fixed_point``), same result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from toolkit.events import SolverStep
from toolkit.methods.awp_projection import Iterate, Projector
from toolkit.methods.awp_step import Stepper
from toolkit.methods.base import SolveContext

STOP_RULES = ("none", "full_grad", "masked_grad", "rel_change")


@dataclass(frozen=True)
class Schedule:
    """How long and how the loop runs (see the module docstring)."""

    iterations: int
    eta: float  # the fixed step (``stepper`` None), the paper's form Z = Θ + ηG
    stop_rule: str = "none"
    tol: float = 1e-4
    keep_best: bool = False
    diverge: float = 10.0
    emit_every: int = 1


@dataclass
class Trace:
    """What the solver panel shows beyond the objective: the step rule, header values, RTN's codes.

    ``header``: values of step 0 (‖C‖_F, ‖C‖₂, their ratio); ``rtn_codes``, ``rtn_scales``: the codes and
    scales of round-to-nearest on W (quantizing runs), against which every emitted step counts the fraction
    of codes that changed (``codes_changed``) and how far the grid moved (``scale_change``
    ‖s − s_RTN‖_F/‖s_RTN‖_F).
    """

    stepper: Stepper | None = None
    header: dict[str, float] = field(default_factory=dict)
    rtn_codes: Tensor | None = None
    rtn_scales: Tensor | None = None


@dataclass
class Outcome:
    """The returned iterate, its objective and why the loop stopped."""

    iterate: Iterate
    objective: float
    objective_init: float
    iterations: int
    stop: str  # max_iter | tol | diverged | fixed_point | stalled
    stop_value: float
    returned: str  # last | best | fallback
    best_step: int
    codes_changed: float = math.nan  # fraction of the returned codes that differ from RTN's


@dataclass(frozen=True)
class Quadratic:
    """f(Θ) = ‖(W − Θ)C^½‖²_F in Gram form, with ‖W C^½‖²_F and ‖W‖_F for the relative numbers.

    ``step_dtype``: the dtype of the per-step product (W − Θ)C. float32 (the default) keeps it in
    W's dtype. bfloat16 multiplies bf16(W − Θ) by bf16(C) (C cast once) and returns G in float32:
    every entry of G then carries a relative rounding error of about 2⁻⁸ of the residual, which
    shrinks with it. Measured on a CPU with AVX512-BF16, one smollm2 layer's 200-step matmuls took
    2.87 s against 6.33 s in float32 (``benchmarks/bench_awp_solver.py``); GPUs not measured.
    """

    W: Tensor  # (out, in)
    C: Tensor  # (in, in), in step_dtype
    out_sq: float  # ⟨W C, W⟩, always in float32
    w_norm: float  # ‖W‖_F

    @classmethod
    def build(cls, W: Tensor, C: Tensor, step_dtype: torch.dtype = torch.float32) -> Quadratic:
        """The problem of one linear (W and C on the same device, float32)."""
        out_sq = float(torch.sum((W @ C) * W, dtype=torch.float64))
        return cls(W, C.to(step_dtype), out_sq, float(torch.linalg.norm(W)))

    def residual(self, theta: Tensor) -> tuple[Tensor, float]:
        """(G, relative error) at Θ: G = (W − Θ) C (out, in) and ‖(W − Θ)C^½‖_F / ‖W C^½‖_F.

        The error is √⟨G, W − Θ⟩ over √⟨WC, W⟩ (the error itself when the dense output is zero;
        inf when not finite). W − Θ is formed once for both.
        """
        D = self.W - theta
        G = D @ self.C if self.C.dtype == D.dtype else (D.to(self.C.dtype) @ self.C).to(D.dtype)
        sq = float(torch.dot(G.reshape(-1), D.reshape(-1)))
        if not math.isfinite(sq):
            return G, math.inf
        sq = max(sq, 0.0)
        return G, math.sqrt(sq / self.out_sq) if self.out_sq > 0 else math.sqrt(sq)

    def loss(self, objective: float) -> float:
        """The loss f = tr((W − Θ)C(W − Θ)ᵀ) from the relative error ``objective`` (as returned by :meth:`residual`)."""
        return objective * objective * (self.out_sq if self.out_sq > 0 else 1.0)

    def ratio(self, value: float) -> float:
        """Return value / ‖W‖_F (value itself for an all-zero W)."""
        return value / self.w_norm if self.w_norm > 0 else value


def _grad_ratio(q: Quadratic, G: Tensor, it: Iterate, masked: bool) -> float:
    """‖2G‖_F/‖W‖_F, over the kept weights only when ``masked``."""
    if masked and it.keep is not None:
        G = G * it.keep
    return q.ratio(2.0 * float(torch.linalg.norm(G)))


def _values(q: Quadratic, prev: Iterate | None, new: Iterate, Z: Tensor | None, trace: Trace) -> dict[str, float]:
    """Per-step trace values: projection distance, step size, sparsity, mask churn, bits, loss, codes and scales moved.

    ``loss`` is f = tr((W − Θ)C(W − Θ)ᵀ) itself (the objective field is its relative square root);
    ``prev``/``Z`` None (step 0, a final step) leaves out the values that need them.
    """
    values = {"bits": float(new.state.spec.bits) if new.state is not None else 32.0}
    if Z is not None:
        values["proj_dist"] = q.ratio(float(torch.linalg.norm(Z - new.theta)))
    if prev is not None:
        values["change"] = q.ratio(float(torch.linalg.norm(new.theta - prev.theta)))
    changed = _codes_changed(new, trace)
    if math.isfinite(changed):
        values["codes_changed"] = changed
    if new.state is not None and trace.rtn_scales is not None and new.state.scales.shape == trace.rtn_scales.shape:
        values["scale_change"] = float(torch.linalg.norm(new.state.scales - trace.rtn_scales)
                                       / torch.linalg.norm(trace.rtn_scales))
    if new.keep is not None:
        values["sparsity"] = 1.0 - int(torch.count_nonzero(new.keep)) / new.keep.numel()
        if prev is not None and prev.keep is not None:
            moved = 0 if new.keep is prev.keep else int(torch.count_nonzero(new.keep != prev.keep))
            values["churn"] = moved / new.keep.numel()
    return values


def _emitter(ctx: SolveContext, q: Quadratic) -> Callable[[int, float, dict[str, float]], None]:
    """A callback sending one SolverStep (solver ``awp``) for this linear, its loss f among the values."""

    def emit(step: int, objective: float, values: dict[str, float]) -> None:
        loss = {"loss": q.loss(objective)} if math.isfinite(objective) else {}
        ctx.emit(SolverStep(layer=ctx.layer, name=ctx.name, solver="awp", step=step,
                            objective=objective, values=values | loss))

    return emit


@dataclass
class _Best:
    iterate: Iterate | None = None
    objective: float = math.inf
    step: int = -1

    def offer(self, it: Iterate, objective: float, step: int) -> None:
        if it.feasible and objective < self.objective:
            self.iterate, self.objective, self.step = it, objective, step


def run_pgd(q: Quadratic, init: Iterate, project: Projector, schedule: Schedule, ctx: SolveContext,
            trace: Trace | None = None) -> Outcome:
    """Algorithm 1 from ``init`` with ``project(Z, t)``; the returned iterate is ``project.finalize``d.

    ``trace.stepper`` chooses η per step (default: the fixed ``schedule.eta``). Emits a SolverStep
    at step 0, every ``schedule.emit_every`` steps and at the last step. When only quantizing, an
    iterate equal to the previous one is a fixed point of every later step with a fixed η (Z depends
    on Θ only and Proj_INT on Z only): the loop stops there (``fixed_point``), same result.
    """
    trace = trace or Trace()
    stepper = trace.stepper or Stepper("paper", schedule.eta)
    emit = _emitter(ctx, q) if schedule.emit_every > 0 else lambda step, objective, values: None
    it = init
    G, objective = q.residual(init.theta)
    objective_init = objective
    best, stop, stop_value, steps, emitted = _Best(), "max_iter", math.nan, 0, 0
    best.offer(it, objective, 0)
    emit(0, objective, trace.header | _values(q, None, it, None, trace) | {"grad": _grad_ratio(q, G, it, False)})
    for t in range(1, schedule.iterations + 1):
        ctx.check_cancel()
        if schedule.stop_rule in ("full_grad", "masked_grad"):
            stop_value = _grad_ratio(q, G, it, schedule.stop_rule == "masked_grad")
            if stop_value < schedule.tol:
                stop = "tol"
                break
        trial = stepper.step(q, it, G, objective, project, t)
        if trial is None:
            stop = "stalled"
            break
        if not math.isfinite(trial.objective) or trial.objective > schedule.diverge:
            ctx.warn(f"awp diverged at step {t} (relative error {trial.objective:.3g}); returning the best "
                     "iterate so far: lower the eta scale")
            stop, stop_value = "diverged", trial.objective
            break
        due = schedule.emit_every > 0 and t % schedule.emit_every == 0
        values = _values(q, it, trial.iterate, trial.Z, trace) | {"eta": trial.eta} if due else {}
        change = q.ratio(float(torch.linalg.norm(trial.iterate.theta - it.theta)))
        fixed = project.target is None and stepper.kind != "backtracking" and change == 0.0
        it, G, objective, steps = trial.iterate, trial.G, trial.objective, t
        best.offer(it, objective, t)
        if due:
            emit(t, objective, values | {"grad": _grad_ratio(q, G, it, False)})
            emitted = t
        if schedule.stop_rule == "rel_change" and change < schedule.tol:
            stop, stop_value = "tol", change
            break
        if fixed:
            stop = "fixed_point"
            break
    if steps != emitted:
        emit(steps, objective, _values(q, None, it, None, trace) | {"grad": _grad_ratio(q, G, it, False)})
    out = Outcome(it, objective, objective_init, steps, stop, stop_value, "last", steps)
    out = _finish(q, out, best, project, schedule)
    out.codes_changed = _codes_changed(out.iterate, trace)
    return out


def _codes_changed(it: Iterate, trace: Trace) -> float:
    """Fraction of ``it``'s codes that differ from round-to-nearest's (nan when not quantized)."""
    if it.state is None or trace.rtn_codes is None or it.state.codes.shape != trace.rtn_codes.shape:
        return math.nan
    return int(torch.count_nonzero(it.state.codes != trace.rtn_codes)) / it.state.codes.numel()


def _finish(q: Quadratic, out: Outcome, best: _Best, project: Projector, schedule: Schedule) -> Outcome:
    """Pick the last or the best feasible iterate (keep_best, divergence) and finalize it."""
    last = out.iterate
    use_best = out.stop == "diverged" or (schedule.keep_best and (best.objective < out.objective
                                                                  or not last.feasible))
    if use_best and best.iterate is not None:
        out.iterate, out.objective, out.best_step = best.iterate, best.objective, best.step
        out.returned = "best"
    if out.stop == "diverged":
        out.returned = "fallback"
    final = project.finalize(out.iterate)
    if final is not out.iterate:
        out.iterate, out.objective = final, q.residual(final.theta)[1]
    return out
