"""GPTQ (Frantar, Ashkboos, Hoefler, Alistarh 2022, arXiv:2210.17323): OBS column sweep for quantization.

With H = C + δ·mean(diag C)·I (C = XXᵀ/N, damping as SparseGPT's) and U the upper Cholesky factor
of H⁻¹, columns q are quantized left to right; the rounding error is spread over the columns not
yet quantized (eq. 3 / Algorithm 1 of the paper)::

    ŵ_q = Q(w_q),   err = (w_q − ŵ_q) / U_qq,   W_{:,q:} ← W_{:,q:} − err ⊗ U_{q,q:}

in lazy blocks of ``block_size`` columns (after a block, W_{:,right} −= Err · U_{block,right}), the
same sweep as :mod:`toolkit.methods.sparsegpt`.

Grid (``ctx.quant``, the min-max grid of :mod:`toolkit.methods.quant_grid`): with groups narrower than the row
and ``act_order=False``, each group's scale and zero point are computed from the group's *current*
(error-updated) weights when the sweep enters it (GPTQ's ``static_groups=False``). Blocks are
aligned to groups, so those are always up to date; the reference reads them from its outer W,
which is the same thing when group = block = 128. One group per row (``g0``): the grid of the
whole row, computed once from W before the sweep, as the reference does.

``act_order=True`` visits columns by decreasing diag(H) (un-permuted at the end). The reference
then cuts groups in the permuted order and stores a ``g_idx``; our QuantState (and the
pack-quantized export) only hold contiguous groups, so act-order uses **static groups** (AutoGPTQ
``static_groups=True``): every group's grid is computed from the original W before the sweep.
Inputs that are always zero (diag C = 0) get H_jj = 1 and W_:j = 0, as in the reference.

Zeros kept (``keep_zeros``). GPTQ's error feedback writes into every later column, so a weight that
was exactly 0 in the input (a pruned model: 2:4, 50 %) comes out as a nonzero code and the zero
pattern is lost. With zeros kept, the input's zeros Z (out, in) are a fixed pruning mask, handled
as SparseGPT's joint prune-and-quantize sweep handles its pruned weights: the quantized value of a
zero position is exactly 0 (its code is the group's zero point, which dequantizes to 0), and its
error ``(w_q − 0) / U_qq`` (w_q: its error-updated value) is spread over the later columns like any
other; the keep-mask returned is ``~Z``. ``auto`` (the default) keeps them in a linear whose weights
are at least :data:`SPARSE_INPUT` exact zeros (a pruned model; a dense checkpoint has far fewer:
33,483 of 106,168,320 in the embedded SmolLM2, 0.03 %), and runs the plain sweep otherwise, bit
for bit as before.
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
    damped_cholesky_inverse,
    option,
    zero_dead_inputs,
)
from toolkit.methods.quant_base import all_kept, checked_gram, quant_only
from toolkit.methods.quant_grid import QuantState, dequantize, grid, group_width
from toolkit.spec.compression import QuantSpec
from toolkit.spec.targets import Target

SPARSE_INPUT = 0.01  # keep_zeros=auto: a linear with at least this fraction of exact zeros keeps them
KEEP_ZEROS = ("auto", "on", "off")


@dataclass(frozen=True)
class GPTQConfig:
    """GPTQ options (defaults of the reference code)."""

    block_size: int = option(128, "columns per lazy-update block (rounded to a multiple of the group size)")
    damp_frac: float = option(0.01, "Hessian damping as a fraction of mean(diag H); escalates ×10 on failure")
    act_order: bool = option(False, "visit columns by decreasing diag(H); uses static groups (module docstring)")
    keep_zeros: str = option("auto", "weights exactly 0 in the input stay exactly 0 (SparseGPT's joint sweep): on, "
                             "off, or auto = on where ≥ 1% of a linear's weights are 0 (a pruned model)", KEEP_ZEROS)

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ToolkitError(f"block_size must be ≥ 1, got {self.block_size}")
        if not 0 <= self.damp_frac < 1e3:
            raise ToolkitError(f"damp_frac must be in [0, 1000), got {self.damp_frac}")
        if self.keep_zeros not in KEEP_ZEROS:
            raise ToolkitError(f"keep_zeros must be one of {', '.join(KEEP_ZEROS)}, got {self.keep_zeros!r}")


@dataclass
class _Grid:
    """Per-group scales/zeros (out, groups) and the same spread over the (permuted) columns (out, in)."""

    scales: Tensor
    zeros: Tensor
    col_scales: Tensor
    col_zeros: Tensor
    dynamic: int = 0  # group width when grids are computed as the sweep enters each group (0: static)
    held: Tensor | None = None  # (out, in) bool in sweep order: the input's zeros, held at exactly 0 (keep_zeros)

    @classmethod
    def static(cls, W: Tensor, spec: QuantSpec, perm: Tensor | None) -> _Grid:
        """The grid of the original W, its columns in sweep order."""
        scales, zeros = grid(W, spec)
        width = group_width(spec, W.shape[1])
        col_s = scales.repeat_interleave(width, dim=1)[:, : W.shape[1]]
        col_z = zeros.repeat_interleave(width, dim=1)[:, : W.shape[1]]
        if perm is not None:
            col_s, col_z = col_s[:, perm], col_z[:, perm]
        return cls(scales, zeros, col_s.contiguous(), col_z.contiguous())

    def enter_group(self, Wg: Tensor, spec: QuantSpec, start: int, width: int) -> None:
        """Dynamic groups: the grid of the group's current weights Wg (out, ≤ width) from column ``start``."""
        s, z = grid(Wg, QuantSpec(spec.bits, 0, spec.symmetric))  # (out, 1): one group
        self.scales[:, start // width] = s[:, 0]
        self.zeros[:, start // width] = z[:, 0]
        self.col_scales[:, start : start + Wg.shape[1]] = s
        self.col_zeros[:, start : start + Wg.shape[1]] = z


def _block_width(cfg: GPTQConfig, width: int, dynamic: bool) -> int:
    """Block size, a multiple of the group width when groups are computed during the sweep."""
    if not dynamic:
        return cfg.block_size
    return width * max(1, cfg.block_size // width)


def _sweep(W: Tensor, U: Tensor, g: _Grid, spec: QuantSpec, block: int, ctx: SolveContext) -> Tensor:
    """The lazy-batch OBS sweep over W (out, in) in place; returns the codes (out, in) uint8 in sweep order.

    Column q of a block is the contiguous row Wt[q] (and St[q], Zt[q] of its grid), so every
    per-column step works on contiguous vectors; codes are converted once per block. ``g.held``
    (out, in) bool in sweep order: positions quantized to exactly 0 (their code is the zero point).
    """
    qmax = spec.levels - 1
    rows, cols = W.shape
    codes = torch.empty((rows, cols), dtype=torch.uint8, device=W.device)
    for i1 in range(0, cols, block):
        ctx.check_cancel()
        i2 = min(i1 + block, cols)
        U1 = U[i1:i2, i1:i2]
        Wt = W[:, i1:i2].t().contiguous()  # (B, out)
        Errt, Qt, deq = torch.empty_like(Wt), torch.empty_like(Wt), torch.empty_like(Wt[0])
        St, Zt = g.col_scales[:, i1:i2].t().contiguous(), g.col_zeros[:, i1:i2].t().contiguous()
        Dt = None if g.held is None else g.held[:, i1:i2].t().contiguous()  # (B, out): held at 0
        for i in range(i2 - i1):
            col = i1 + i
            if g.dynamic and col % g.dynamic == 0:
                g.enter_group(Wt[i : i + g.dynamic].t(), spec, col, g.dynamic)
                St[i : i + g.dynamic] = g.scales[:, col // g.dynamic]
                Zt[i : i + g.dynamic] = g.zeros[:, col // g.dynamic]
            s, z, q = St[i], Zt[i], Qt[i]
            torch.div(Wt[i], s, out=q).round_().add_(z).clamp_(0, qmax)  # code = clamp(round(w/s) + z)
            if Dt is not None:
                torch.where(Dt[i], z, q, out=q)  # a kept zero: the zero point, which dequantizes to exactly 0
            torch.sub(q, z, out=deq).mul_(s)  # ŵ = (code − z)·s
            torch.sub(Wt[i], deq, out=Errt[i]).div_(U1[i, i])  # (w − ŵ)/U_qq
            Wt[i:].addr_(U1[i, i:], Errt[i], alpha=-1.0)  # W_{:,q:} −= err ⊗ U_{q,q:}
        codes[:, i1:i2] = Qt.t().to(torch.uint8)
        W[:, i2:] -= Errt.t() @ U[i1:i2, i2:]
    return codes


def quantize_linear(W: Tensor, stats: LinearStats, target: Target | None, cfg: GPTQConfig, ctx: SolveContext
                    ) -> PruneResult:
    """GPTQ on W (out, in) float32 → dequantized weight, QuantState, keep-mask all True.

    Needs ``stats.gram``. Does not modify W. Raises ToolkitError for a sparsity target or a
    missing grid, NumericalError for non-finite statistics or a Cholesky failure after escalation.
    """
    spec = quant_only(target, ctx, "gptq")
    H = checked_gram(W, stats, ctx, "gptq")
    zeros = _kept_zeros(W, cfg.keep_zeros)
    W, H = zero_dead_inputs(W.to(SOLVER_DTYPE).clone(), H)
    cols = W.shape[1]
    width = group_width(spec, cols)
    perm = torch.argsort(torch.diagonal(H), descending=True) if cfg.act_order else None
    dynamic = perm is None and width < cols
    g = _Grid.static(W, spec, perm)
    g.dynamic = width if dynamic else 0
    if perm is not None:
        W, H = W[:, perm], H[perm][:, perm]
    U, damping = damped_cholesky_inverse(H, cfg.damp_frac, ctx)
    g.held = zeros if zeros is None or perm is None else zeros[:, perm]
    codes = _sweep(W, U, g, spec, _block_width(cfg, width, dynamic), ctx)
    if perm is not None:
        codes = codes[:, torch.argsort(perm)]
    state = QuantState(codes, g.scales, g.zeros, spec)
    info = {"act_order": cfg.act_order, "groups": "dynamic" if dynamic else "static",
            "kept_zeros": 0 if zeros is None else int(zeros.sum())}
    keep = all_kept(W) if zeros is None else ~zeros
    return PruneResult(weight=dequantize(state), keep_mask=keep, damping=damping, info=info, quant=state)


def _kept_zeros(W: Tensor, keep_zeros: str) -> Tensor | None:
    """The input's exact zeros (out, in) bool to hold at 0, or None for the plain sweep (module docstring)."""
    if keep_zeros == "off":
        return None
    zeros = W == 0
    count = int(zeros.sum())
    if count == 0 or (keep_zeros == "auto" and count < SPARSE_INPUT * W.numel()):
        return None
    return zeros


SPEC = MethodSpec(
    name="gptq",
    fn=quantize_linear,
    config=GPTQConfig,
    needs=frozenset({Stat.GRAM}),
    targets=(),
    summary="OBS column sweep with lazy blocks: quantize, spread the error on later columns (GPTQ)",
    produces=frozenset({Produces.QUANT}),
)
