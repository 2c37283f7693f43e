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

Result and export (our design). The model in this toolkit keeps full-precision activations and no
op to fold 1/s into, so the weight it computes with is Ŵ = Q(clip(W·diag(s)))·diag(s)⁻¹: that is
``weight``. ``quant`` is a :class:`ScaledQuantState`: the codes/scales/zeros of the *scaled*
weight plus ``input_scale`` = s, with ``weight == dequantize(quant) / input_scale`` (see
:func:`effective_weight`; for s = 1 it is a plain state). Ŵ is not on any per-group grid of the
original columns, so a pack-quantized checkpoint cannot hold it exactly: real AWQ folds 1/s into
the preceding norm or linear, which a per-linear method cannot do. :mod:`toolkit.models.save_quant`
therefore refuses AWQ states (it never re-quantizes Ŵ, which would change the values); export
rtn, gptq or awp results instead.
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


def awq_state(W: Tensor, stats: LinearStats, spec: QuantSpec, cfg: AWQConfig, name: str
              ) -> tuple[ScaledQuantState, dict]:
    """AWQ of W (out, in) float32 with ``stats`` on W's device: the scaled state and an info dict (α*, clipping).

    The activation magnitude is a_j = √(‖X_j‖²/N) over all calibration tokens (``col_sq_norms``).
    """
    C = stats.gram
    act = torch.sqrt(stats.col_sq_norms.clamp(min=0))
    s, alpha = search_scale(W, C, act, spec, cfg.n_grid)
    Ws = W * s
    clipped = clips(cfg, name)
    if clipped:
        Cs = C / s.unsqueeze(0) / s.unsqueeze(1)
        bound = search_clip(Ws, Cs, spec, cfg)
        Ws = torch.maximum(torch.minimum(Ws, bound), -bound)
    state = quantize(Ws, spec)
    info = {"alpha": alpha, "scale_min": float(s.min()), "scale_max": float(s.max()), "clipped": clipped}
    return ScaledQuantState(state.codes, state.scales, state.zeros, spec, s), info


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
)
