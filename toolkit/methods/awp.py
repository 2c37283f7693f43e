"""AWP: activation-aware pruning and quantization by projected gradient descent.

Liu, Koike-Akino, Wang, Mansour, Brand 2025, arXiv:2506.10205; implementation notes
``papers/awp.md`` (ambiguities A1-A19).

One linear, W (out, in), C = XXᵀ/N (in, in) (``stats.gram``). AWP solves (eq. 7)

    min_{Θ ∈ 𝒞} f1(Θ) = ‖W C^½ − Θ C^½‖²_F,    ∇f1 = −2 (W − Θ) C          (eq. 8-9)

with Algorithm 1 (iterative hard thresholding when 𝒞 is a sparsity set)::

    Z^(t) = Θ^(t) + η (W − Θ^(t)) C,    Θ^(t+1) = Proj_𝒞(Z^(t))

The mode follows from the run: ``target`` only → **prune**, ``ctx.quant`` only → **quantize**,
both → **joint**. Defaults are the paper's (§4) or the notes' recommendation:

=========== ============================ ============= ======================================
mode        Θ^(0)                        η             iterations / projection
=========== ============================ ============= ======================================
prune       Wanda's solution (A12)       2/‖C‖_F       ≤ 200, Proj_row (k = in − ⌊p·in⌋ per row)
quantize    RTN(W) on the run's grid     1.5/‖C‖_F     10, min-max grid recomputed from Z (A6)
joint       Wanda's solution (see below) 1.5/‖C‖_F     25 ramp (p·t/25) + 25 prune + 50 joint,
                                                       Proj_INT(Proj_row(Z)), final mask (§1.8)
=========== ============================ ============= ======================================

Why the step barely moves a quantized iterate (measured; the paper's Table 3 claim does not carry
over to our synthetic layers). With η = 1.5/‖C‖_F the gradient step on input j is about
η·C_jj·(residual), and on activations with a few outlier channels ‖C‖_F is set by those channels.
On ``benchmarks/bench_quant_layer.py --shapes 512x512 --stats outliers`` (rank-32 correlated
inputs, 6 channels ×20) η·C_jj has median 7.9e-4 (max 0.95), the median step |η(W−Θ)C| is about
1.6e-3 of a grid step s, and Proj_INT (round to nearest) snaps almost every weight back to its RTN
code: each step moves Θ by ≈4e-4·‖W‖_F while the projection undoes ≈6.5e-3·‖W‖_F of Z. Only the
outlier channels move. Relative output errors ‖ΔW X‖/‖W X‖ at g128 (RTN / GPTQ / AWQ / AWP):
INT4 0.1007 / 0.0398 / 0.0562 / 0.0993; INT3 0.2117 / 0.0870 / 0.1096 / 0.2103; INT2 0.5042 /
0.2477 / 0.2387 / 0.5057 (above its RTN start: Algorithm 1 returns the last iterate;
``keep_best=true`` gives 0.4977). 100 iterations (INT4 0.1022, INT2 0.650), a frozen grid (0.0999)
and η = 1.9/‖C‖_F (0.1022) do not close the gap: the iterate sits near a fixed point of
round(Θ + ηG) = Θ. This is Algorithm 1 as published (step, grid recomputed from Z, objective
tr((W−Θ)C(W−Θ)ᵀ) with G = (W−Θ)C = −½∇, 10 iterations, last iterate), so the gap is reported,
not patched. Pruning does not stall (a pruned weight is not snapped back): AWP 50% gives 0.0296
on that layer against SparseGPT 0.0373 and Wanda 0.0835.

Joint initialisation. The paper does not state Θ0 for the joint schedule; the notes (A7) suggest W.
From W the tiny step makes the 0 → p ramp keep the largest |W|: magnitude pruning, not
activation-aware. On the same layer, INT4 g128 at 25 / 50 / 75%: from W 0.104 / 0.197 / 0.395,
from Wanda's solution (the paper's pruning init: "a good initial point helps") 0.100 / 0.109 /
0.151, Wanda+AWQ 0.060 / 0.098 / 0.182, AWQ+Wanda 0.062 / 0.101 / 0.184. So ``joint_init``
defaults to ``wanda`` (``dense`` keeps the notes' reading). The remaining gap at 25-50% is the
quantization stall above: AWQ's scaling beats RTN's grid, which the joint iterations barely leave.

Open choices, each an option: ``stop_rule`` (A5; ``auto`` = the paper's ‖∇f1‖_F/‖W‖_F < ``tol``
in prune mode and fixed counts otherwise), ``keep_best`` (A18; off = Algorithm 1's last iterate),
``grid_update`` (A6; ``nearest`` keeps ‖Proj(Z) − Z‖ ≤ ‖Θ − Z‖ per group, docs/methods/awp.md),
``joint_order`` (§1.5c), ``joint_init`` (A7), iteration counts, η scales,
ramp lengths, the divergence bound, the event budget and ``step_dtype`` (float32; ``bfloat16``
runs the per-step matmul (W − Θ)C in bf16, which the paper does not do: the per-step matmuls are
6.3 of a smollm2 layer's 9.4 solve seconds on the CPU, so this is the lever on solve time,
measured in the README).
Step size (``step``, :mod:`toolkit.methods.awp_step`): ``paper`` (η = scale/‖C‖_F above), ``spectral``
(η = spectral_scale/‖C‖₂, the 1/L step of f), ``jacobi`` (ours: a step per input, η G diag(C)⁻¹ with
η = spectral_scale/‖D^-½ C D^-½‖₂), ``backtracking`` (Armijo from 2/‖C‖₂, monotone);
``iterations`` replaces the last phase's count and ``stop=gradient`` applies the paper's pruning rule
(‖∇f1‖_F/‖W‖_F < tol or 200 iterations) in every mode. Measured on smollm2, ‖C‖_F/‖C‖₂ is 1.0-2.2
per linear (one direction dominates C), so the paper's step is already ≈ 1.5/‖C‖₂: the stall is the
spread of C's spectrum below its top eigenvalue, not ‖C‖_F ≫ ‖C‖₂ (docs/methods/awp.md).
Start of the quantize mode (``quant_init``, ours): ``rtn`` (the paper's) or ``gptq``, GPTQ's solution of
the same objective, which the projected steps then refine; with ``grid_update=nearest`` and a step
η ≤ 1/‖C‖₂ (``step=spectral``) each step cannot raise f, so the result's loss is at most GPTQ's
(tests/methods/test_awp_init.py). ``codes_changed`` still counts against RTN's codes.
n:m targets use the n:m projection (an extension; the paper evaluates per-row unstructured
sparsity only).

Result: ``weight`` is Θ; ``keep_mask`` is the last Proj_row mask (all True when quantizing only);
``quant`` is the QuantState of the last projection, so ``weight == dequantize(quant)`` exactly. In
joint mode pruned weights hold their group's zero-point code (dequantizes to exactly 0), so the
export needs no separate mask; weights rounded to 0 on the grid stay in the keep-mask (sparsity is
counted from the mask). Each step emits a SolverStep (``objective`` = ‖(W−Θ)C^½‖_F/‖WC^½‖_F;
values: ``proj_dist`` ‖Z−Θ‖_F/‖W‖_F, ``change``, ``grad``, ``bits``, ``sparsity``, ``churn``),
thinned to at most ``max_events`` per linear.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from toolkit.errors import ToolkitError
from toolkit.methods import gptq, wanda
from toolkit.methods.awp_projection import Iterate, Projector
from toolkit.methods.awp_solver import STOP_RULES, Outcome, Quadratic, Schedule, Trace, run_pgd
from toolkit.methods.awp_step import GRADIENT_STOP_ITERS, STEPS, STOPS, jacobi_stepper, make_stepper, spectral_norm
from toolkit.methods.base import (
    SOLVER_DTYPE,
    LinearStats,
    MethodSpec,
    Produces,
    PruneResult,
    SolveContext,
    Stat,
    option,
)
from toolkit.methods.quant_base import all_kept, checked_gram, sparse_target, stats_on
from toolkit.methods.quant_grid import QuantState, dequantize, quantize
from toolkit.spec.compression import QuantSpec
from toolkit.spec.targets import NM, Target, Unstructured

QUANT_INITS = ("rtn", "gptq")


@dataclass(frozen=True)
class AWPConfig:
    """AWP options; defaults are the paper's settings or the notes' recommendations (module docstring)."""

    prune_iters: int = option(200, "prune mode: maximum iterations (paper 200)")
    quant_iters: int = option(10, "quantize mode: iterations (paper 10)")
    ramp_iters: int = option(25, "joint: iterations ramping the pruned fraction from 0 to the target (paper 25)")
    hold_iters: int = option(25, "joint: pruning-only iterations at the target after the ramp (paper 25)")
    joint_iters: int = option(50, "joint: prune+quantize iterations after the hold (paper 50)")
    prune_eta: float = option(2.0, "prune mode: η = prune_eta / ‖C‖_F (paper 2)")
    quant_eta: float = option(1.5, "quantize mode: η = quant_eta / ‖C‖_F (paper 1.5)")
    joint_eta: float = option(1.5, "joint: η = joint_eta / ‖C‖_F (paper 1.5)")
    stop_rule: str = option("auto", "stop when the rule's value < tol; auto = full_grad when pruning, none "
                            "otherwise (paper, notes A5)", choices=("auto", *STOP_RULES))
    tol: float = option(1e-4, "threshold of the stop rule (paper 1e-4)")
    keep_best: bool = option(False, "return the best feasible iterate instead of the last one (not in the paper; "
                             "notes A18)")
    grid_update: str = option("recompute", "quantization grid recomputed from Z every step, frozen at the "
                              "first grid (notes A6), or nearest: per group the nearer of Z's grid and the "
                              "current iterate's (not in the paper; docs/methods/awp.md)",
                              choices=("recompute", "frozen", "nearest"))
    joint_order: str = option("prune_first", "joint projection: Proj_INT(Proj_row(Z)) (paper's experiments) or "
                              "Proj_row(Proj_INT(Z))", choices=("prune_first", "quant_first"))
    joint_init: str = option("wanda", "joint Θ0: Wanda's solution at the target (default: from W the ramp "
                             "is magnitude pruning, module docstring) or W (notes A7)", choices=("wanda", "dense"))
    diverge: float = option(10.0, "declare divergence when ‖(W−Θ)C^½‖/‖WC^½‖ exceeds this (Θ = 0 gives 1)")
    max_events: int = option(100, "at most this many SolverStep events per linear (0 = none)")
    step: str = option("paper", "step size: paper = the mode's eta scale / ‖C‖_F (the paper's), spectral = "
                       "spectral_scale / ‖C‖₂ (1/L of f), jacobi = a step per input, G·diag(C)⁻¹ times "
                       "spectral_scale / ‖D^-½ C D^-½‖₂, backtracking = Armijo line search from 2/‖C‖₂ "
                       "(jacobi and backtracking are not in the paper; docs/methods/awp.md)", choices=STEPS)
    spectral_scale: float = option(1.0, "step=spectral and jacobi: η = spectral_scale / the norm (1 = the 1/L "
                                   "step)")
    power_iters: int = option(20, "power iterations estimating ‖C‖₂ (one (in, in) matrix-vector product each)")
    iterations: int = option(-1, "iterations of the mode's last phase (quant_iters, prune_iters or joint_iters); "
                             "-1 = those options (or 200 with stop=gradient)")
    stop: str = option("fixed", "fixed = the mode's stop rule (stop_rule); gradient = the paper's pruning rule in "
                       "every mode: ‖∇f‖_F/‖W‖_F < tol or 200 iterations", choices=STOPS)
    quant_init: str = option("rtn", "quantize mode: Θ0 = round-to-nearest (the paper's) or gptq = GPTQ's solution "
                             "(its default options), which AWP then refines (not in the paper; docs/methods/awp.md)",
                             choices=QUANT_INITS)
    keep_zeros: str = option("auto", "quant_init=gptq: GPTQ's keep_zeros for the start (on, off, or auto = the "
                             "model's lineage, docs/models.md); RTN's start and the steps never hold zeros",
                             choices=gptq.KEEP_ZEROS)
    step_dtype: str = option("float32", "dtype of the per-step matmul (W − Θ)C: float32 (the paper's "
                             "arithmetic) or bfloat16 (faster; ~2⁻⁸ relative rounding of the gradient, "
                             "not in the paper)", choices=("float32", "bfloat16"))

    def __post_init__(self) -> None:
        for name in ("prune_iters", "quant_iters", "ramp_iters", "hold_iters", "joint_iters", "max_events"):
            if getattr(self, name) < 0:
                raise ToolkitError(f"{name} must be ≥ 0, got {getattr(self, name)}")
        if self.iterations == 0 or self.iterations < -1:
            raise ToolkitError(f"iterations must be ≥ 1 (or -1 = the mode's count), got {self.iterations}")
        if self.power_iters < 1:
            raise ToolkitError(f"power_iters must be ≥ 1, got {self.power_iters}")
        if self.stop == "gradient" and self.stop_rule not in ("auto", "full_grad"):
            raise ToolkitError(f"stop=gradient is the full_grad rule; drop stop_rule={self.stop_rule} or stop=gradient")
        for name in ("prune_eta", "quant_eta", "joint_eta", "spectral_scale", "diverge"):
            if not (getattr(self, name) > 0 and math.isfinite(getattr(self, name))):
                raise ToolkitError(f"{name} must be a positive number, got {getattr(self, name)}")
        if not self.tol >= 0:
            raise ToolkitError(f"tol must be ≥ 0, got {self.tol}")
        for name in ("stop_rule", "grid_update", "joint_order", "joint_init", "step", "stop", "step_dtype",
                     "quant_init", "keep_zeros"):
            choices = type(self).__dataclass_fields__[name].metadata["choices"]
            if getattr(self, name) not in choices:
                raise ToolkitError(f"{name} must be one of {list(choices)}, got {getattr(self, name)!r}")


def validate(shape: tuple[int, int], target: Target | None, spec: QuantSpec | None) -> str:
    """The mode (``prune`` | ``quantize`` | ``joint``) for this target and grid, or a ToolkitError."""
    if target is None and spec is None:
        raise ToolkitError("awp needs a sparsity (--sparsity 50%) and/or a grid (--quant int4:g128)")
    if target is not None:
        sparse_target(shape, target, "awp")
    return "quantize" if target is None else "prune" if spec is None else "joint"


def check_config(target: Target | None, cfg: AWPConfig) -> None:
    """``quant_init`` only starts a quantize-only run (a sparsity starts from ``joint_init``)."""
    if target is not None and cfg.quant_init != "rtn":
        raise ToolkitError(f"awp: quant_init={cfg.quant_init} starts a quantize-only run; with a sparsity the "
                           "start is joint_init: drop quant_init or the sparsity")


def _quant_init(W: Tensor, stats: LinearStats, cfg: AWPConfig, ctx: SolveContext) -> QuantState:
    """Θ0's codes and grid: RTN's (the paper's) or GPTQ's solution of the same objective (``quant_init``)."""
    assert ctx.quant is not None
    if cfg.quant_init == "gptq":
        state = gptq.quantize_linear(W, stats, None, gptq.GPTQConfig(keep_zeros=cfg.keep_zeros), ctx).quant
        assert state is not None
        return state
    return quantize(W, ctx.quant)


def _wanda_init(W: Tensor, stats: LinearStats, target: Unstructured | NM, ctx: SolveContext) -> Iterate:
    """Θ0 = Wanda's solution: its per-row (or n:m) mask on W, no update (notes A12); ``stats`` on W's device."""
    result = wanda.prune(W, stats, target, wanda.WandaConfig(), ctx)
    return Iterate(result.weight.to(W.device, SOLVER_DTYPE), result.keep_mask.to(W.device))


def _setup(W: Tensor, stats: LinearStats, target: Target | None, cfg: AWPConfig, ctx: SolveContext
           ) -> tuple[Iterate, Projector, int, float]:
    """(Θ0, projector, iterations, η scale) of the mode chosen by ``target`` and ``ctx.quant``."""
    spec = ctx.quant
    frozen, nearest = cfg.grid_update == "frozen", cfg.grid_update == "nearest"
    if target is None:
        assert spec is not None
        state = _quant_init(W, stats, cfg, ctx)
        grid = (state.scales, state.zeros) if frozen else None
        projector = Projector(None, spec, frozen=frozen, grid=grid, nearest=nearest)
        return Iterate(dequantize(state), None, state), projector, _count(cfg, cfg.quant_iters), cfg.quant_eta
    assert isinstance(target, Unstructured | NM)
    if spec is None:
        return (_wanda_init(W, stats, target, ctx), Projector(target, None), _count(cfg, cfg.prune_iters),
                cfg.prune_eta)
    init = Iterate(W.clone(), None, None, feasible=False)
    if cfg.joint_init == "wanda":
        init = _wanda_init(W, stats, target, ctx)
        init.feasible = False
    projector = Projector(target, spec, ramp=cfg.ramp_iters, quant_from=cfg.ramp_iters + cfg.hold_iters + 1,
                          order=cfg.joint_order, frozen=frozen, nearest=nearest)
    return init, projector, cfg.ramp_iters + cfg.hold_iters + _count(cfg, cfg.joint_iters), cfg.joint_eta


def _count(cfg: AWPConfig, default: int) -> int:
    """Iterations of the mode's last phase: ``iterations`` when given, 200 with stop=gradient, else ``default``."""
    if cfg.iterations > 0:
        return cfg.iterations
    return GRADIENT_STOP_ITERS if cfg.stop == "gradient" else default


def _schedule(cfg: AWPConfig, mode: str, iterations: int, eta: float) -> Schedule:
    rule = cfg.stop_rule if cfg.stop_rule != "auto" else "full_grad" if mode == "prune" else "none"
    rule = "full_grad" if cfg.stop == "gradient" else rule
    every = math.ceil(iterations / cfg.max_events) if cfg.max_events > 0 and iterations > 0 else 0
    return Schedule(iterations=iterations, eta=eta, stop_rule=rule, tol=cfg.tol, keep_best=cfg.keep_best,
                    diverge=cfg.diverge, emit_every=every if cfg.max_events > 0 else 0)


def _info(mode: str, out: Outcome, trace: Trace, schedule: Schedule) -> dict:
    """Plain-data summary of the run (SublayerPruned.info)."""
    def plain(value: float) -> float | None:
        return value if math.isfinite(value) else None

    stepper = trace.stepper
    assert stepper is not None
    return {"mode": mode, "iterations": out.iterations, "stop": out.stop, "stop_rule": schedule.stop_rule,
            "stop_value": plain(out.stop_value), "eta": schedule.eta, "step": stepper.kind,
            "eta_last": stepper.last if stepper.kind == "backtracking" else schedule.eta,
            "residuals": stepper.evaluations, **{k: plain(v) for k, v in trace.header.items()},
            "objective_init": plain(out.objective_init), "objective": plain(out.objective),
            "returned": out.returned, "best_step": out.best_step, "codes_changed": plain(out.codes_changed)}


def _trace(W: Tensor, C: Tensor, cfg: AWPConfig, projector: Projector, eta_scale: float,
           reference: QuantState | None) -> Trace:
    """‖C‖_F, ‖C‖₂ (power iteration), the stepper of ``cfg.step`` and RTN's codes and scales for the diagnosis."""
    c_fro = float(torch.linalg.norm(C))
    c_spec = spectral_norm(C, cfg.power_iters) if c_fro > 0 else 0.0
    header = {"c_fro": c_fro, "c_spec": c_spec, "c_ratio": c_fro / c_spec if c_spec > 0 else math.nan,
              # median C_jj/‖C‖₂: η·C_jj is the share of the way to its own optimum a step moves weight j
              "diag_ratio": float(torch.diagonal(C).median()) / c_spec if c_spec > 0 else math.nan}
    if cfg.step == "jacobi" and c_spec > 0:
        stepper, header["c_scaled_spec"] = jacobi_stepper(C, cfg.spectral_scale, cfg.power_iters)
    else:
        stepper = make_stepper(cfg.step, c_fro, c_spec, eta_scale, cfg.spectral_scale, projector) if c_spec > 0 \
            else make_stepper("paper", 1.0, 1.0, 0.0, 1.0, projector)
    return Trace(stepper, header, None if reference is None else reference.codes,
                 None if reference is None else reference.scales)


def prune(W: Tensor, stats: LinearStats, target: Target | None, cfg: AWPConfig, ctx: SolveContext) -> PruneResult:
    """AWP on one linear: W (out, in) float32 → Θ, its keep-mask and (when quantizing) its QuantState.

    Needs ``stats.gram``. Does not modify W. Raises ToolkitError for a structured target, an n:m
    width mismatch or neither target nor grid; NumericalError for non-finite statistics. Warns
    (RunWarning) and returns the best iterate when the iteration diverges, and returns Θ0 when
    C = 0 (every input of the linear is zero). Dead inputs (zero rows/columns of C) get no gradient:
    their weights stay where Θ0 put them.
    """
    mode = validate((W.shape[0], W.shape[1]), target, ctx.quant)
    check_config(target, cfg)
    W = W.to(SOLVER_DTYPE)
    C = checked_gram(W, stats, ctx, "awp")
    init, projector, iterations, eta_scale = _setup(W, stats_on(C, stats), target, cfg, ctx)
    rtn_start = target is None and cfg.quant_init == "rtn" and init.state is not None
    reference = None if ctx.quant is None else init.state if rtn_start else quantize(W, ctx.quant)
    trace = _trace(W, C, cfg, projector, eta_scale, reference)
    q = Quadratic.build(W, C, getattr(torch, cfg.step_dtype))
    if reference is not None and target is None and not rtn_start:  # what the start gained over RTN, on this C
        trace.header["objective_rtn"] = q.residual(dequantize(reference))[1]
    if not trace.header["c_spec"] > 0:
        ctx.warn("awp: C = 0 (every input of this linear is zero); returning the initial point")
        iterations = 0
    assert trace.stepper is not None
    schedule = _schedule(cfg, mode, iterations, trace.stepper.eta)
    out = run_pgd(q, init, projector, schedule, ctx, trace)
    it = out.iterate
    keep = it.keep if it.keep is not None else all_kept(W)
    return PruneResult(weight=it.theta, keep_mask=keep, info=_info(mode, out, trace, schedule), quant=it.state)


SPEC = MethodSpec(
    name="awp",
    fn=prune,
    config=AWPConfig,
    needs=frozenset({Stat.GRAM}),
    targets=(Unstructured, NM),
    summary="projected gradient descent on ‖(W−Θ)C^½‖²: prune, quantize or both (AWP)",
    produces=frozenset({Produces.MASK, Produces.QUANT}),
    config_check=lambda compression, cfg: check_config(compression.sparsity, cfg),
)
