"""FISTAPruner (Zhao et al. 2024, arXiv:2408.03728v1): a LASSO per linear, solved by FISTA.

For one linear with dense weight W (out, in), dense inputs X and pruned-path inputs X* (the
inputs it sees once the earlier groups of its decoder layer are pruned), Eq. (4) is

    min_{W*}  ½‖W* X* − W X‖²_F + λ Σ_i ‖W*_{i,:}‖₁        (row-wise ℓ1 = elementwise ℓ1)

solved in Gram form (``fista_solver``; X is never formed) with K FISTA steps of size 1/L,
L = λ_max(G*), soft-thresholding at ρ = λ/L (Eq. 5a-5d, 7). Algorithm 1 wraps it:

    best ← warm start, E_best ← E(best), t ← 0, E_stop ← ∞
    repeat
        W_K ← FISTA(λ, start = best);  W_K+1 ← round(W_K)                  (Eq. 8)
        E_total ← E(W_K+1);  E_round ← E_total − E(W_K)                      (Eq. 9)
        if E_total < E_best: E_stop ← (E_best − E_total)/E_best; best ← W_K+1; E_best ← E_total
        else: t ← t + 1
        bisection on [lam_low, lam_high]: E_round/E_total > ξ ⇒ lam_low ← λ (more sparsity),
        else lam_high ← λ;  λ ← midpoint                                     (Section 3.3)
    until t ≥ T or E_stop < ε

Statistics and λ units (our decision). The engine gives means over N tokens: G* = Σx*x*ᵀ/N,
C = Σx*xᵀ/N, G = Σxxᵀ/N. Dividing Eq. (4) by N gives ½‖W*X* − WX‖²/N + (λ/N)‖W*‖₁: the same
minimiser, with λ_mean = λ_paper/N and the same threshold ρ = λ_paper/λ_max(X*X*ᵀ) =
λ_mean/λ_max(G*). With ``lam_units="sum"`` (default) every λ option is in the paper's units and
ρ = λ/(N·λ_max(G*)), so λ₀ = 1e-5 and the interval [0, 1e6] keep their meaning for the N tokens
actually used (the paper has N = 128×2048). ``lam_units="mean"`` reads λ per token: ρ = λ/λ_max(G*).
Events and ``info`` report λ in the configured units; SolverStep objectives are per token,
f(W*) + λ_mean‖W*‖₁.

Implementation decisions (A-numbers: §7 of the FISTAPruner implementation notes):
- Error correction: the target is W X (dense path) with f = ½tr(W*G*W*ᵀ) − tr(W*CWᵀ) + ½tr(WGWᵀ);
  ``error_correction=False`` or missing ``cross``/``dense_gram`` uses C = G = G* (target W X*).
- Warm start computed per linear on the same G* (A13) with the wanda, sparsegpt or magnitude
  solver and its default options; one that misses the target pattern is rounded (A14) with a
  warning. The returned error is never above the warm start's: only strict improvements replace it.
- Standard Beck-Teboulle momentum, or the literal Eq. (5d) (A3); the prox iterate x_K is returned
  and Eq. (7) compares consecutive x (A4). Arithmetic midpoint, or geometric = bisection on log λ
  over [max(lam_low, lam_floor), lam_high] (A7). T counts all
  failed rounds, as the pseudo-code (A8); E_stop starts at +∞ (A9). Unstructured rounding is over
  the whole matrix (A10); FISTA's extra zeros stay (A11). ``max_rounds`` caps the outer loop (not
  in the paper; it only matters with a tiny ε).
- All inputs dead (L = 0): the warm start is returned with a warning.

The solver is device-local (everything on W's device); layers or linears on different devices are
the engine's business. Comparison group for unstructured targets: the whole matrix.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from toolkit.errors import NumericalError, ToolkitError
from toolkit.events import LambdaStep, SolverStep
from toolkit.methods import magnitude, sparsegpt, wanda
from toolkit.methods.base import SOLVER_DTYPE, LinearStats, MethodSpec, PruneResult, SolveContext, Stat, option
from toolkit.methods.fista_solver import (
    InnerSettings,
    Quadratic,
    build_quadratic,
    fista,
    meets_target,
    round_to_target,
    zero_fraction,
)
from toolkit.spec.targets import NM, Target, Unstructured, validate_for_shape

WARM_STARTS: dict[str, tuple[Callable[..., PruneResult], type]] = {
    "wanda": (wanda.prune, wanda.WandaConfig),
    "sparsegpt": (sparsegpt.prune, sparsegpt.SparseGPTConfig),
    "magnitude": (magnitude.prune, magnitude.MagnitudeConfig),
}


@dataclass(frozen=True)
class FistaConfig:
    """FISTAPruner options; defaults are the paper's (§4.1) or the notes' recommendations."""

    warm_start: str = option("sparsegpt", "initial sparse solution W*_0 (paper: sparsegpt for OPT, wanda for "
                             "LLaMA; our default sparsegpt reaches a lower error within the round cap)",
                             choices=tuple(WARM_STARTS))
    error_correction: bool = option(True, "target the dense output W X (intra-layer error correction, Eq. 2)")
    lam_init: float = option(1e-5, "initial λ (paper 1e-5), in lam_units")
    lam_low: float = option(0.0, "lower end of the λ bisection interval (paper 0)")
    lam_high: float = option(1e6, "upper end of the λ bisection interval (paper 1e6)")
    lam_units: str = option("sum", "λ for the objective summed over tokens (paper) or per token (mean)",
                            choices=("sum", "mean"))
    xi: float = option(0.3, "threshold ξ on E_round/E_total: above it λ goes up (paper 0.3)")
    bisection: str = option("arithmetic", "λ bisection: arithmetic midpoints on [lam_low, lam_high] (paper), or "
                            "geometric = bisection on log λ over [max(lam_low, lam_floor), lam_high]",
                            choices=("arithmetic", "geometric"))
    lam_floor: float = option(1e-8, "lower end of the log-λ bracket of bisection=geometric (log 0 is −∞); "
                              "in lam_units")
    fista_iters: int = option(20, "K, FISTA iterations per outer round (paper 20)")
    inner_tol: float = option(1e-6, "stop FISTA when ‖x_k − x_(k−1)‖_F falls below this (Eq. 7)")
    patience: int = option(3, "T, stop after this many rounds without improvement (paper 3)")
    reset_patience: bool = option(False, "count consecutive (True) rather than total failed rounds")
    eps: float = option(1e-3, "ε, stop when the relative improvement falls below it (paper 1e-6 OPT, 1e-3 LLaMA)")
    max_rounds: int = option(5, "cap on outer rounds (not in the paper, which stops on T/ε only): bounds the "
                             "time per linear; 100 ≈ the paper's rule alone")
    momentum: str = option("standard", "FISTA extrapolation: Beck-Teboulle, or the literal Eq. 5d",
                           choices=("standard", "paper"))
    lipschitz: str = option("eigvalsh", "how L = λ_max(G*) is computed (power pads by 1%)",
                            choices=("eigvalsh", "power"))
    round_group: str = option("matrix", "unstructured rounding over the whole matrix (paper) or per row",
                              choices=("matrix", "row"))
    trace_every: int = option(1, "emit a SolverStep every this many FISTA iterations (0 = none)")

    def __post_init__(self) -> None:
        if not (0.0 <= self.lam_low < self.lam_high and math.isfinite(self.lam_high)):
            raise ToolkitError("FISTA needs 0 ≤ lam_low < lam_high < ∞, e.g. lam_low=0 lam_high=1e6")
        if not self.lam_low <= self.lam_init <= self.lam_high:
            raise ToolkitError(f"lam_init must lie in [lam_low, lam_high] = [{self.lam_low:g}, {self.lam_high:g}]")
        if not 0.0 < self.lam_floor < self.lam_high:
            raise ToolkitError(f"lam_floor must lie in (0, lam_high = {self.lam_high:g}), got {self.lam_floor:g}; "
                               "e.g. lam_floor=1e-8")
        if self.bisection == "geometric" and self.lam_init < self.lam_floor:
            raise ToolkitError(f"bisection=geometric needs lam_init ≥ lam_floor = {self.lam_floor:g}, "
                               f"got lam_init={self.lam_init:g}")
        if not 0.0 < self.xi < 1.0:
            raise ToolkitError(f"xi must be in (0, 1), got {self.xi}; the paper uses 0.3")
        for name, low in (("fista_iters", 1), ("patience", 1), ("max_rounds", 1), ("trace_every", 0)):
            if getattr(self, name) < low:
                raise ToolkitError(f"{name} must be ≥ {low}, got {getattr(self, name)}")
        if not self.eps > 0 or not self.inner_tol >= 0:
            raise ToolkitError("eps must be > 0 (paper 1e-3 or 1e-6) and inner_tol ≥ 0 (paper 1e-6)")
        for name in ("warm_start", "lam_units", "bisection", "momentum", "lipschitz", "round_group"):
            choices = type(self).__dataclass_fields__[name].metadata["choices"]
            if getattr(self, name) not in choices:
                raise ToolkitError(f"{name} must be one of {list(choices)}, got {getattr(self, name)!r}")


@dataclass
class LambdaBisection:
    """λ search state: λ ∈ [low, high]; ``update`` moves λ towards the side the ratio asks for.

    Arithmetic: λ ← (low + high)/2, the paper's bisection; from λ₀ = 1e-5 on [0, 1e6] its first
    raise lands on 5e5. Geometric: λ ← √(max(low, floor)·high), a bisection on log λ over the
    bracket [floor, high] (log 0 is −∞, hence the floor); its first raise from λ₀ = 1e-5 lands on
    √(1e-5·1e6) ≈ 3.2 and each further round halves the bracket's width in decades.
    """

    lam: float
    low: float
    high: float
    xi: float
    geometric: bool = False
    floor: float = 1e-8  # the lower end of the log-λ bracket (geometric only)

    def update(self, ratio: float) -> None:
        """E_round/E_total > ξ: too little sparsity from FISTA, raise λ; else lower it."""
        if ratio > self.xi:
            self.low = self.lam
        else:
            self.high = self.lam
        if self.geometric:
            self.lam = math.sqrt(max(self.low, self.floor) * self.high)
        else:
            self.lam = 0.5 * (self.low + self.high)


@dataclass
class _Outcome:
    """What the outer loop kept and why it stopped."""

    weight: Tensor
    keep: Tensor
    error: float
    lam_best: float = math.nan
    lam_last: float = math.nan
    rounds: int = 0
    steps: int = 0
    stop: str = "max_rounds"


def _statistics(W: Tensor, stats: LinearStats, cfg: FistaConfig, ctx: SolveContext
                ) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """(G*, C, G) on W's device in float32; C and G are None without error correction."""
    if stats.count < 1:
        raise ToolkitError(f"{ctx.name}: FISTA needs statistics over at least one token, got count={stats.count}")
    named = {"gram": stats.gram, "cross": stats.cross, "dense_gram": stats.dense_gram}
    for key, value in named.items():
        if value is not None and not bool(value.isfinite().all()):
            raise NumericalError(f"{ctx.name}: stats.{key} has non-finite entries; check the calibration "
                                 "inputs (overflow in half precision?) before running fista")
    G = stats.gram.to(W.device, SOLVER_DTYPE)
    if not cfg.error_correction:
        return G, None, None
    missing = [key for key in ("cross", "dense_gram") if named[key] is None]
    if missing:
        ctx.warn(f"fista: stats.{' and stats.'.join(missing)} missing, so error correction is off for this "
                 "linear (it targets W X* instead of W X); have the engine gather Stat.CROSS and Stat.DENSE_GRAM")
        return G, None, None
    assert stats.cross is not None and stats.dense_gram is not None
    return G, stats.cross.to(W.device, SOLVER_DTYPE), stats.dense_gram.to(W.device, SOLVER_DTYPE)


def _warm_start(W: Tensor, G: Tensor, count: int, target: Target, cfg: FistaConfig, ctx: SolveContext
                ) -> PruneResult:
    """The warm-start solver on G* (A13); rounded with a warning if it misses the pattern (A14)."""
    fn, config = WARM_STARTS[cfg.warm_start]
    result = fn(W, LinearStats(gram=G, count=count), target, config(), ctx)
    weight, keep = result.weight.to(W.device, SOLVER_DTYPE), result.keep_mask.to(W.device)
    if not meets_target(keep, target) or bool((weight[~keep] != 0).any()):
        ctx.warn(f"fista: the {cfg.warm_start} warm start misses the {target} pattern; rounding it by magnitude")
        weight, keep = round_to_target(weight, target, cfg.round_group)
    return PruneResult(weight=weight, keep_mask=keep, damping=result.damping)


def _tracer(ctx: SolveContext, lam: float, round_index: int, offset: int) -> Callable[[int, float, float], None]:
    """A FISTA trace callback emitting one SolverStep per traced iteration."""

    def emit(k: int, objective: float, step_norm: float) -> None:
        ctx.emit(SolverStep(layer=ctx.layer, name=ctx.name, solver="fista", step=offset + k, objective=objective,
                            values={"lam": lam, "round": float(round_index), "step_norm": step_norm}))

    return emit


def _search(q: Quadratic, best: _Outcome, target: Target, cfg: FistaConfig, ctx: SolveContext,
            rho_per_lam: float) -> _Outcome:
    """Algorithm 1 from ``best`` (the warm start): FISTA rounds, rounding, λ bisection, T/ε stops."""
    geometric = cfg.bisection == "geometric"
    low = max(cfg.lam_low, cfg.lam_floor) if geometric else cfg.lam_low  # the log bracket starts at the floor
    lam = LambdaBisection(cfg.lam_init, low, cfg.lam_high, cfg.xi, geometric, cfg.lam_floor)
    inner = InnerSettings(cfg.fista_iters, cfg.inner_tol, cfg.momentum, cfg.trace_every)
    failures, e_stop = 0, math.inf
    for r in range(cfg.max_rounds):
        ctx.check_cancel()
        trace = _tracer(ctx, lam.lam, r, best.steps) if cfg.trace_every else None
        out = fista(q, best.weight, lam.lam * rho_per_lam, inner, trace)
        rounded, keep = round_to_target(out.x, target, cfg.round_group)
        e_total = q.error(rounded)
        e_round = e_total - math.sqrt(2.0 * q.value(out.x - q.W, out.xG))
        ratio = e_round / e_total if e_total > 0 else 0.0
        improved = e_total < best.error
        best.rounds, best.steps, best.lam_last = r + 1, best.steps + out.iterations, lam.lam
        if improved:
            e_stop = (best.error - e_total) / best.error
            best.weight, best.keep, best.error, best.lam_best = rounded, keep, e_total, lam.lam
            failures = 0 if cfg.reset_patience else failures
        else:
            failures += 1
        ctx.emit(LambdaStep(layer=ctx.layer, name=ctx.name, round=r, lam=lam.lam, lam_low=lam.low,
                            lam_high=lam.high, e_total=e_total, e_round=e_round, ratio=ratio, xi=cfg.xi,
                            sparsity_before_rounding=zero_fraction(out.x), improved=improved))
        lam.update(ratio)
        if failures >= cfg.patience or e_stop < cfg.eps:
            best.stop = "patience" if failures >= cfg.patience else "eps"
            break
    return best


def _plain(value: float) -> float | None:
    """None for "no value" (nan), so ``info`` stays valid JSON."""
    return value if math.isfinite(value) else None


def prune(W: Tensor, stats: LinearStats, target: Target | None, cfg: FistaConfig, ctx: SolveContext) -> PruneResult:
    """FISTAPruner for one linear: W (out, in) float32 → pruned W* (out, in) float32 and its keep-mask.

    Needs ``stats.gram`` (G*), and for error correction ``stats.cross`` (C) and ``stats.dense_gram``
    (G). Emits one LambdaStep per outer round and SolverSteps per FISTA iteration; ``info`` holds
    λ (configured units), rounds, stop reason and relative errors E/‖WX‖ of the warm start and the
    result. Does not modify W or the statistics. Raises ToolkitError for a structured target or
    an n:m width mismatch, NumericalError for non-finite statistics.
    """
    assert target is not None, "a pruning method always gets a sparsity target (MethodSpec.check)"
    if not isinstance(target, Unstructured | NM):
        raise ToolkitError(f"fista supports unstructured and n:m targets, not {target}; try wanda or sparsegpt")
    validate_for_shape(target, (W.shape[0], W.shape[1]))
    W = W.to(SOLVER_DTYPE)
    G, C, Gd = _statistics(W, stats, cfg, ctx)
    q = build_quadratic(W, G, C, Gd, cfg.lipschitz)
    warm = _warm_start(W, G, stats.count, target, cfg, ctx)
    e_warm = q.error(warm.weight)
    best = _Outcome(weight=warm.weight, keep=warm.keep_mask, error=e_warm)
    if not (math.isfinite(q.L) and q.L > 0):
        ctx.warn(f"fista: λ_max(G*) = {q.L:g} (every input of this linear is zero); returning the "
                 f"{cfg.warm_start} warm start unchanged")
        best.stop = "dead_inputs"
    else:
        scale = 1.0 / stats.count if cfg.lam_units == "sum" else 1.0
        best = _search(q, best, target, cfg, ctx, rho_per_lam=scale / q.L)
    info = {
        "lam_final": _plain(best.lam_last), "lam_best": _plain(best.lam_best), "rounds": best.rounds,
        "fista_steps": best.steps, "stop_reason": best.stop, "warm_start": cfg.warm_start,
        "warm_start_error": q.relative(e_warm), "final_error": q.relative(best.error),
        "chosen": "fista" if math.isfinite(best.lam_best) else "warm_start",
        "lipschitz": q.L, "error_correction": C is not None, "sparsity": zero_fraction(best.weight),
    }
    return PruneResult(weight=best.weight, keep_mask=best.keep, damping=warm.damping, info=info)


SPEC = MethodSpec(
    name="fista",
    fn=prune,
    config=FistaConfig,
    needs=frozenset({Stat.GRAM, Stat.CROSS, Stat.DENSE_GRAM}),
    targets=(Unstructured, NM),
    summary="LASSO per linear by FISTA, rounded to the target, λ bisection; refines a warm start",
    sequential="group",
)
