"""AWQ (Lin et al. 2024, arXiv:2306.00978): activation-aware per-input-channel scaling, then clipping.

One linear, W (out, in), C = XXᵀ/N (in, in), grid Q = RTN on ``ctx.quant`` (:mod:`toolkit.methods.quant_grid`).

1. Scale search (``auto_scale`` of llm-awq): for α ∈ {0, 1/n, …, (n−1)/n} (``n_grid`` = 20)::

       s = max(a^α, 1e-4),  s ← s / √(max s · min s),   Ŵ(α) = Q(W·diag(s))·diag(s)⁻¹
       α* = argmin ‖(Ŵ(α) − W) X‖²_F / N = argmin tr(ΔW C ΔWᵀ)

   a_j is the activation magnitude of input j. llm-awq uses mean|x_j|; the engine only gathers
   second moments, so we use the RMS a_j = √(‖X_j‖²/N) = √C_jj (proportional for symmetric
   Gaussian-like inputs; outlier channels weigh more). The loss is this linear's output error from the Gram, where the
   reference measures the output of the block the linears feed (e.g. the attention for q/k/v,
   which share one scale there; here every linear gets its own s).
2. Clipping search (``auto_clip``): in the scaled domain W' = W·diag(s), for every row r and group
   g, shrink the range to ±ratio·max|W'_rg| for ratio ∈ {1, 1 − 1/20, …} (``clip_grid`` points,
   down to 1 − ``max_shrink``) and keep the ratio minimising the group's own output error
   Δ_rg C'_gg Δ_rgᵀ with C' = diag(s)⁻¹ C diag(s)⁻¹. That is exactly llm-awq's criterion (each
   group's partial output over its own inputs, ignoring cross-group terms) computed from the diagonal
   block C_gg of the Gram over all calibration tokens (the reference samples 512 tokens).
   ``clip="auto"`` skips q/k projections (names containing q_, k_, query, key, Wqkv) as llm-awq does.

Result and export. The weight the model computes with is Ŵ = Q(clip(W·diag(s)))·diag(s)⁻¹: that is
``weight``. ``quant`` is a :class:`ScaledQuantState`: the codes/scales/zeros of the *scaled* weight plus
``input_scale`` = s, with ``weight == dequantize(quant) / input_scale`` (see :func:`effective_weight`).
Ŵ is not on any per-group grid of the original columns. With ``scale=own`` (the default) every linear
has its own s, so nothing before q, k and v can take them and the run does not save. With
``scale=shared`` the linears of a group (fed one tensor) share one s, searched on their stacked rows
(:func:`quantize_group`, the engine's group solve); the engine then folds diag(s)⁻¹ into the norm or the
rows of the linear that feeds the group when the layer is done (:mod:`toolkit.engine.fold`), leaving each
linear its plain grid Q(W·diag s), which saves like any other state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from toolkit.errors import ToolkitError
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
from toolkit.methods.quant_base import all_kept, checked_gram, quant_only, stats_on
from toolkit.methods.quant_grid import QuantState, dequantize, group_width, project, quantize
from toolkit.spec.compression import QuantSpec
from toolkit.spec.targets import Target

QK_NAMES = ("q_", "k_", "query", "key", "Wqkv")  # llm-awq skips clipping for these


@dataclass
class ScaledQuantState(QuantState):
    """A QuantState of W·diag(s) plus s (in,): the effective weight is dequantize(state) / s."""

    input_scale: Tensor = None  # type: ignore[assignment]  # (in,) float32, always set

    def to(self, device: torch.device | str) -> ScaledQuantState:
        """The same state on ``device``."""
        return ScaledQuantState(self.codes.to(device), self.scales.to(device), self.zeros.to(device), self.spec,
                                self.input_scale.to(device))

    def effective_weight(self) -> Tensor:
        """dequantize(state) / s: the scale search multiplied the columns by s before quantizing."""
        return dequantize(self) / self.input_scale.unsqueeze(0)


def effective_weight(state: QuantState) -> Tensor:
    """The weight a state stands for: dequantize(state), divided by the input scale of an AWQ state."""
    return state.effective_weight()


@dataclass(frozen=True)
class AWQConfig:
    """AWQ options (defaults of llm-awq)."""

    n_grid: int = option(20, "α grid {0, 1/n, …, (n−1)/n} of the scale search (1 = no scaling)")
    scale: str = option("own", "own: each linear searches its own s (not savable); shared: one s per group of "
                        "linears fed one tensor, as llm-awq, folded into the norm or linear feeding them so the "
                        "run saves (toolkit/models/fold.py)", choices=("own", "shared"))
    clip: str = option("auto", "clipping search: auto skips q/k projections (llm-awq), on, off",
                       choices=("auto", "on", "off"))
    clip_grid: int = option(20, "clipping ratios 1 − i/clip_grid")
    max_shrink: float = option(0.5, "smallest clipping ratio is 1 − max_shrink (exclusive)")

    def __post_init__(self) -> None:
        if self.n_grid < 1 or self.clip_grid < 1:
            raise ToolkitError("n_grid and clip_grid must be ≥ 1 (llm-awq uses 20)")
        if not 0.0 <= self.max_shrink < 1.0:
            raise ToolkitError(f"max_shrink must be in [0, 1), got {self.max_shrink}")
        if self.clip not in ("auto", "on", "off"):
            raise ToolkitError(f"clip must be auto, on or off, got {self.clip!r}")
        if self.scale not in ("own", "shared"):
            raise ToolkitError(f"scale must be own or shared, got {self.scale!r}")


def output_error(dW: Tensor, C: Tensor) -> float:
    """tr(ΔW C ΔWᵀ) = ‖ΔW X‖²_F / N for ΔW (out, in)."""
    return float(torch.sum((dW @ C) * dW, dtype=torch.float64))


def search_scale(W: Tensor, C: Tensor, act: Tensor, spec: QuantSpec, n_grid: int) -> tuple[Tensor, float]:
    """(s, α*) minimising tr(ΔW C ΔWᵀ) for Ŵ = Q(W·diag(s))·diag(s)⁻¹ over the α grid (step 1)."""
    best_s, best_alpha, best_err = torch.ones_like(act), 0.0, float("inf")
    for k in range(n_grid):
        alpha = k / n_grid
        s = act.pow(alpha).clamp(min=1e-4)
        s = s / torch.sqrt(s.max() * s.min())
        err = output_error(project(W * s, spec) / s - W, C)
        if err < best_err:
            best_s, best_alpha, best_err = s, alpha, err
    return best_s, best_alpha


def group_blocks(C: Tensor, width: int) -> Tensor:
    """The diagonal blocks C_gg (groups, width, width) of C, zero-padded to whole groups."""
    pad = (-C.shape[0]) % width
    C = torch.nn.functional.pad(C, (0, pad, 0, pad))
    groups = C.shape[0] // width
    idx = torch.arange(groups, device=C.device)
    return C.reshape(groups, width, groups, width)[idx, :, idx, :]  # (groups, width, width)


def group_errors(dW: Tensor, blocks: Tensor) -> Tensor:
    """Δ_rg C_gg Δ_rgᵀ for every row r and group g: (out, groups)."""
    width = blocks.shape[1]
    D = torch.nn.functional.pad(dW, (0, (-dW.shape[1]) % width)).reshape(dW.shape[0], -1, width)
    D = D.transpose(0, 1)  # (groups, out, width)
    return (torch.bmm(D, blocks) * D).sum(-1).t()  # (out, groups)


def search_clip(Ws: Tensor, Cs: Tensor, spec: QuantSpec, cfg: AWQConfig) -> Tensor:
    """Per (row, group) clipping bound of the scaled weight Ws (out, in) minimising the group error (step 2)."""
    width = group_width(spec, Ws.shape[1])
    blocks = group_blocks(Cs, width)
    cols = Ws.shape[1]
    padded = torch.nn.functional.pad(Ws.abs(), (0, (-cols) % width))  # zeros do not change a max of |w|
    amax = padded.reshape(Ws.shape[0], -1, width).amax(-1)  # (out, groups)
    best_err = torch.full_like(amax, float("inf"))
    best_bound = amax.clone()
    for i in range(int(cfg.max_shrink * cfg.clip_grid)):
        bound = amax * (1 - i / cfg.clip_grid)  # (out, groups)
        cols_bound = bound.repeat_interleave(width, dim=1)[:, :cols]
        Wc = torch.maximum(torch.minimum(Ws, cols_bound), -cols_bound)
        err = group_errors(project(Wc, spec) - Ws, blocks)
        better = err < best_err
        best_err = torch.where(better, err, best_err)
        best_bound = torch.where(better, bound, best_bound)
    return best_bound.repeat_interleave(width, dim=1)[:, :cols]


def clips(cfg: AWQConfig, name: str) -> bool:
    """Whether the clipping search runs for the linear called ``name``."""
    if cfg.clip != "auto":
        return cfg.clip == "on"
    return not any(token in name.rsplit(".", 1)[-1] for token in QK_NAMES)


def awq_state(W: Tensor, stats: LinearStats, spec: QuantSpec, cfg: AWQConfig, name: str,
              scale: tuple[Tensor, float] | None = None) -> tuple[ScaledQuantState, dict]:
    """AWQ of W (out, in) float32 with ``stats`` on W's device: the scaled state and an info dict (α*, clipping).

    The activation magnitude is a_j = √(‖X_j‖²/N) over all calibration tokens (``col_sq_norms``).
    ``scale`` (s, α*) given: the group's shared scale, searched once for all its linears (:func:`group_scale`).
    """
    C = stats.gram
    s, alpha = scale if scale is not None else search_scale(W, C, _activation(stats), spec, cfg.n_grid)
    Ws = W * s
    clipped = clips(cfg, name)
    if clipped:
        Cs = C / s.unsqueeze(0) / s.unsqueeze(1)
        bound = search_clip(Ws, Cs, spec, cfg)
        Ws = torch.maximum(torch.minimum(Ws, bound), -bound)
    state = quantize(Ws, spec)
    info = {"alpha": alpha, "scale_min": float(s.min()), "scale_max": float(s.max()), "clipped": clipped}
    return ScaledQuantState(state.codes, state.scales, state.zeros, spec, s), info


def _activation(stats: LinearStats) -> Tensor:
    """a_j = √(‖X_j‖²/N) of every input."""
    return torch.sqrt(stats.col_sq_norms.clamp(min=0))


def group_scale(weights: dict[str, Tensor], stats: LinearStats, spec: QuantSpec, cfg: AWQConfig
                ) -> tuple[Tensor, float]:
    """One (s, α*) for linears fed one tensor: the search of :func:`search_scale` on their rows stacked.

    With W = [W_1; …; W_k] the loss tr(ΔW C ΔWᵀ) = Σ_i tr(ΔW_i C ΔW_iᵀ) is the sum of the linears' output
    errors (llm-awq searches one scale for q/k/v and for gate/up on the block's output).
    """
    return search_scale(torch.cat(list(weights.values())), stats.gram, _activation(stats), spec, cfg.n_grid)


def group_input_scale(weights: dict[str, Tensor], stats: LinearStats, spec: QuantSpec, cfg: AWQConfig,
                      ctx: SolveContext) -> tuple[Tensor, float] | None:
    """The group's shared (s, α*) (:func:`group_scale`), or None where the engine cannot fold one.

    None (``ctx.foldable`` False: o_proj under grouped-query attention) means s = 1, clipping only, as llm-awq
    does; said once, on the first layer.
    """
    if ctx.foldable:
        return group_scale(weights, stats, spec, cfg)
    if ctx.layer == 0:
        ctx.warn(f"{', '.join(weights)}: the input scale cannot be folded into what feeds it (grouped-query "
                 "attention: each value head feeds several query heads), so AWQ leaves it out here (s = 1, "
                 "clipping only), as llm-awq does")
    return None


def unit_scale(W: Tensor) -> tuple[Tensor, float]:
    """(s = 1, α = 0) for W's inputs: the scale of a group whose input scale cannot be folded."""
    return torch.ones(W.shape[1], device=W.device), 0.0


def grid_of(state: ScaledQuantState, scale: tuple[Tensor, float] | None) -> QuantState:
    """The state the engine stores: scaled (s folded later) when the group has a scale, its plain grid when s = 1."""
    return state if scale is not None else QuantState(state.codes, state.scales, state.zeros, state.spec)


def quantize_group(weights: dict[str, Tensor], stats: LinearStats, target: Target | None, cfg: AWQConfig,
                   ctx: SolveContext) -> dict[str, PruneResult]:
    """AWQ with ``scale=shared`` on every linear of a group at once (``MethodSpec.group_fn``).

    One s for all, searched on their stacked rows (:func:`group_input_scale`); the engine folds it into what
    feeds the group when the layer is done. ``scale=own`` solves one linear at a time (:func:`quantize_linear`).
    """
    spec = quant_only(target, ctx, "awq")
    first = next(iter(weights.values())).to(SOLVER_DTYPE)
    stats = stats_on(checked_gram(first, stats, ctx, "awq"), stats)
    weights = {name: W.to(SOLVER_DTYPE) for name, W in weights.items()}
    shared = group_input_scale(weights, stats, spec, cfg, ctx)
    results = {}
    for name, W in weights.items():
        state, info = awq_state(W, stats, spec, cfg, name, shared or unit_scale(W))
        grid = grid_of(state, shared)
        results[name] = PruneResult(weight=effective_weight(grid), keep_mask=all_kept(W), info=info | {
            "scale": "shared" if shared is not None else "left out"}, quant=grid)
    return results


def quantize_linear(W: Tensor, stats: LinearStats, target: Target | None, cfg: AWQConfig, ctx: SolveContext
                    ) -> PruneResult:
    """AWQ on W (out, in) float32 → Ŵ = dequantize(state)/s, its ScaledQuantState, keep-mask all True.

    Needs ``stats.gram``. Does not modify W. Raises ToolkitError for a sparsity target or a missing
    grid, NumericalError for non-finite statistics.
    """
    spec = quant_only(target, ctx, "awq")
    W = W.to(SOLVER_DTYPE)
    state, info = awq_state(W, stats_on(checked_gram(W, stats, ctx, "awq"), stats), spec, cfg, ctx.name)
    return PruneResult(weight=effective_weight(state), keep_mask=all_kept(W), info=info, quant=state)


SPEC = MethodSpec(
    name="awq",
    fn=quantize_linear,
    config=AWQConfig,
    needs=frozenset({Stat.GRAM}),
    targets=(),
    summary="activation-aware input scaling and clipping search, then round-to-nearest (AWQ)",
    produces=frozenset({Produces.QUANT}),
    saves_quant=False,
    savable=lambda cfg: cfg.scale == "shared",
    group_fn=quantize_group,
)
