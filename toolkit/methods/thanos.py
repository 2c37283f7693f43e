"""Thanos (Ilin & Richtárik 2025, arXiv 2504.05346): block-wise multi-weight OBS pruning.

Objective per linear (eqs. 1–2): min ‖(Ŵ − W) X‖_F² under the mask, i.e. tr(ΔW H ΔWᵀ) with
H = ``stats.gram`` = Σ x xᵀ / N (means; the paper's 2XXᵀ differs by a constant that cancels in
every update). W (out, in): rows are outputs, columns inputs. Ĥ = H + δ·mean(diag H)·I.

Unstructured (Alg. 1/9) and n:m (Alg. 8) sweep the columns left to right in blocks
[j1, j2) of ``block_size`` columns; F = {j1, …, in−1} are the still-free columns.
- Mask. Unstructured: the global residual mask ψ_X (eqs. 11, 69–70), i.e. the r weights with the
  smallest Wanda score |W_ij|·‖X_j‖ over *all remaining columns* of the *current, updated*
  weights, r = ⌊p·out·in⌋ − (removed so far); the block keeps the part of it in its columns, so
  rows remove different counts s_i. Comparison group: the whole matrix of the linear.
  n:m: in every group of m columns of the block keep the n largest scores (comparison group: the
  m consecutive inputs of a row; every row removes the same s = (m−n)·B/m, so no padding).
- Update. Every row removes its s_i masked weights at once by eq. (10), δ̂ = −u R̂⁻¹ R with
  R = rows q of (Ĥ_FF)⁻¹ (see :mod:`toolkit.methods.thanos_update`), which also moves the kept
  weights of the block (in-block) and every column to the right (off-block).
- Inverse. With U upper-triangular, Uᵀ U = Ĥ⁻¹ (one factorisation per linear), the identity
  (Ĥ_FF)⁻¹ = U_FFᵀ U_FF gives the block's rows as U[j1:j2, j1:j2]ᵀ U[j1:j2, j1:] (notes §1.10):
  no re-inversion per block.
- Outlier rows (n:m, §4.7.1): the ⌈α·out⌉ rows with the largest h_i = ‖W_i X‖² stay dense.

Structured (Alg. 2/7): the ⌈α·out⌉ outlier rows stay dense; the s = ⌈p·in/(1−α)⌉ columns with
the smallest v_j = ‖W_{rest, j}‖²·‖X_j‖² (eq. 15; comparison group: the input columns, scored over
the non-outlier rows) are removed from the other rows in closed form, Δ = −W_S (Ĥ⁻¹_SS)⁻¹ Ĥ⁻¹_S:
(eq. 13), so overall ≈ p of the weights are zero. One static mask, no block loop; we evaluate
(13) with the Cholesky factor of the column-permuted Ĥ⁻¹ (S first): Δ_K = −W_S U_SS⁻¹ U_SK.

Events: one ``BlockStep`` per block (structured: one), whose ``error`` is the block's increase of
the damped objective tr(ΔW Ĥ ΔWᵀ) = Σ_i u_i R̂_i⁻¹ u_iᵀ in mean-per-token units (‖ΔW X‖²/N with
Ĥ for H); over the blocks it sums to the final tr(ΔW Ĥ ΔWᵀ) against the input weights.

Paper vs official code (github.com/vectozavr/thanos @1bc9aed; notes §8) and our choice:
- damping: the paper has none; the code adds 1%·mean(diag H). Ours: ``damp_frac`` = 0.01,
  escalating ×10 with a Warning event if Cholesky fails (shared with SparseGPT).
- per-block inverse: the code calls inv(H[j2:, j2:]) every block; ours uses the Cholesky identity
  above (the same matrix up to rounding, O(in³) once instead of O(in⁴/B)).
- block size: the paper uses 128 (unstructured) and 512 (n:m); the code's table script uses 512
  for all. Ours: the paper's, via ``block_size = 0``.
- outlier count: the paper ⌈α·out⌉; the code int(α·out)+1 (so α = 0 still keeps one row). Paper.
- row score h_i: the paper ‖W_i X‖² (``row_score="full"``, default); the code's latest commit
  Σ_j W_ij² ‖X_j‖² (``row_score="diag"``).
- α: the paper's default is 0.1 (§5.1) for n:m and structured; unstructured Thanos has none (the
  code ignores it). ``alpha = -1`` picks that; an explicit α > 0 for unstructured keeps those rows
  dense and spreads the same ⌊p·out·in⌋ removals over the others (our extension).
- removal count: ⌊p·out·in⌋ (eq. 2 and the code; Alg. 1 and G.4.1 disagree).
- padding: the paper pads q with index 1, the code with −1; we pad with a masked position and the
  identity of eq. (78). Rows are sorted by s_i and solved in chunks (the code's ``v_blocksize``).
- rows with s_i > B/2 solve the smaller system on their kept block columns instead (an exact
  identity, ours; see :func:`~toolkit.methods.thanos_update.multiweight_factor`).
- ties in ψ_X: the code's topk breaks them arbitrarily; we take them in row-major order.
- n:m: the toolkit's n:m keeps n of m (2:4, 4:8 remove m−n = n, as the paper's).
- the code's B = 1 special case (a lazy SparseGPT-like update) is not implemented.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor

from toolkit.errors import ToolkitError
from toolkit.events import BlockStep
from toolkit.methods.base import (
    SOLVER_DTYPE,
    LinearStats,
    MethodSpec,
    PruneResult,
    SolveContext,
    Stat,
    damped_cholesky_inverse,
    option,
    structured_supported,
    zero_dead_inputs,
)
from toolkit.methods.masks import keep_nm
from toolkit.methods.thanos_update import (
    SelectScratch,
    ceil_count,
    multiweight_factor,
    outlier_rows,
    residual_block_mask,
    row_scores,
    structured_update,
)
from toolkit.spec.targets import NM, Structured, Target, Unstructured

PAPER_BLOCK = {Unstructured: 128, NM: 512}  # §5.1; structured is one-shot
PAPER_ALPHA = {Unstructured: 0.0, NM: 0.1, Structured: 0.1}  # §5.1 "unless stated otherwise"


@dataclass(frozen=True)
class ThanosConfig:
    """Thanos options; 0 / −1 select the paper's value for the sparsity pattern."""

    block_size: int = option(0, "columns per block; 0 = paper default (128 unstructured, 512 n:m)")
    alpha: float = option(
        -1.0,
        "fraction of outlier rows kept dense, in [0, 1); -1 = paper default "
        "(0 unstructured, 0.1 n:m and structured)",
    )
    damp_frac: float = option(0.01, "Hessian damping as a fraction of mean(diag H); escalates ×10 on failure")
    row_score: str = option(
        "full", "outlier-row score: full = ‖W_i X‖² (paper), diag = Σ_j W_ij²‖X_j‖² (official code)",
        choices=("full", "diag"),
    )

    def __post_init__(self) -> None:
        if self.block_size < 0:
            raise ToolkitError(f"block_size must be ≥ 1, or 0 for the paper default; got {self.block_size}")
        if self.alpha != -1.0 and not 0.0 <= self.alpha < 1.0:
            raise ToolkitError(
                f"alpha (fraction of outlier rows) must be in [0, 1), e.g. 0.1, or -1 for the "
                f"paper default; got {self.alpha}"
            )
        if not 0.0 <= self.damp_frac < 1e3:
            raise ToolkitError(f"damp_frac must be in [0, 1000), e.g. 0.01; got {self.damp_frac}")
        if self.row_score not in ("full", "diag"):
            raise ToolkitError(f"row_score must be 'full' or 'diag'; got {self.row_score!r}")

    def alpha_for(self, target: Target) -> float:
        """α for this target: the explicit value, or the paper's default for the pattern."""
        return PAPER_ALPHA[type(target)] if self.alpha == -1.0 else self.alpha


def _block_width(cfg: ThanosConfig, target: Unstructured | NM, cols: int, ctx: SolveContext) -> int:
    """Block size for the sweep: clamped to the width (warns if set explicitly), n:m → multiple of m."""
    block = cfg.block_size or PAPER_BLOCK[type(target)]
    if block > cols:
        if cfg.block_size:
            ctx.warn(f"thanos block_size {block} is wider than the {cols} inputs; clamped to {cols}")
        block = cols
    if isinstance(target, NM):
        block = max(target.m, block // target.m * target.m)
    return block


def _outliers(W: Tensor, H: Tensor, alpha: float, cfg: ThanosConfig) -> Tensor:
    """Indices of the outlier rows (kept dense); empty when α = 0."""
    if alpha == 0.0:
        return torch.zeros(0, dtype=torch.int64, device=W.device)
    return outlier_rows(row_scores(W, H, cfg.row_score), alpha)


@dataclass(frozen=True)
class _SweepPlan:
    """What the block sweep needs besides W and U: ‖X_j‖ (in,), dense rows (out,) bool, B."""

    col_norms: Tensor
    dense: Tensor
    block: int

    @property
    def has_dense(self) -> bool:
        """True if some rows are outlier rows."""
        return bool(self.dense.any())


def _sweep(W: Tensor, U: Tensor, target: Unstructured | NM, plan: _SweepPlan, ctx: SolveContext) -> Tensor:
    """The block sweep of Alg. 1 / Alg. 8 on W (out, in) in place; returns the keep-mask (out, in)."""
    rows, cols = W.shape
    keep = torch.ones_like(W, dtype=torch.bool)
    dense, block = plan.dense, plan.block
    remaining = 0
    scores, scratch = torch.empty(0, device=W.device), None
    if isinstance(target, Unstructured):
        remaining = int(target.sparsity * rows * cols)
        scores = torch.empty(rows * cols, dtype=W.dtype, device=W.device)  # reused by every block: no page faults
        scratch = SelectScratch.of_size(rows * cols, W.device)
    for index, j1 in enumerate(range(0, cols, block)):
        ctx.check_cancel()
        started = time.perf_counter()
        j2 = min(j1 + block, cols)
        if isinstance(target, NM):
            metric = W[:, j1:j2].abs() * plan.col_norms[j1:j2].unsqueeze(0)  # (out, B) Wanda score
            prune = ~keep_nm(metric, target) & ~dense.unsqueeze(1)  # (out, B)
        else:
            metric = torch.abs(W[:, j1:], out=scores[: rows * (cols - j1)].view(rows, cols - j1))  # (out, f)
            metric.mul_(plan.col_norms[j1:].unsqueeze(0))  # Wanda score |W_ij|·‖X_j‖
            if plan.has_dense:
                metric[dense] = torch.inf  # outlier rows are never selected
            prune = residual_block_mask(metric, remaining, j2 - j1, scratch)  # (out, B)
        removed = int(torch.count_nonzero(prune))
        error = 0.0
        if removed:
            factor, loss = multiweight_factor(W[:, j1:j2], U[j1:j2, j1:j2], prune)
            W[:, j1:].addmm_(factor, U[j1:j2, j1:], alpha=-1.0)  # += δ̂ = −F U_rows, in place
            W[:, j1:j2].masked_fill_(prune, 0.0)  # exact zeros (δ̂ gives −u up to rounding)
            keep[:, j1:j2] = ~prune
            error = float(loss.sum())
        remaining -= removed
        seconds = time.perf_counter() - started
        ctx.emit(BlockStep(layer=ctx.layer, name=ctx.name, block=index, removed=removed, error=error, seconds=seconds))
    return keep


def _prune_blockwise(
    W: Tensor, H: Tensor, target: Unstructured | NM, cfg: ThanosConfig, ctx: SolveContext
) -> PruneResult:
    """Unstructured / n:m Thanos on a float32 copy W with dead inputs already handled."""
    rows, cols = W.shape
    if isinstance(target, NM) and cols % target.m:
        raise ToolkitError(f"n:m pattern {target} needs the input width {cols} to be divisible by {target.m}")
    alpha = cfg.alpha_for(target)
    outliers = _outliers(W, H, alpha, cfg)
    if isinstance(target, Unstructured):
        total = int(target.sparsity * rows * cols)
        if total and total >= (rows - outliers.numel()) * cols:
            raise ToolkitError(
                f"sparsity {target} with alpha={alpha} would remove every weight of the "
                f"{rows - outliers.numel()} non-outlier rows; lower alpha or the sparsity"
            )
    block = _block_width(cfg, target, cols, ctx)
    U, damping = damped_cholesky_inverse(H, cfg.damp_frac, ctx)
    dense = torch.zeros(rows, dtype=torch.bool, device=W.device)
    dense[outliers] = True
    keep = _sweep(W, U, target, _SweepPlan(torch.sqrt(torch.diagonal(H)), dense, block), ctx)
    info = {"outlier_rows": outliers.tolist(), "alpha": alpha, "block_size": block}
    return PruneResult(weight=W, keep_mask=keep, damping=damping, info=info)


def _prune_structured(W: Tensor, H: Tensor, target: Structured, cfg: ThanosConfig, ctx: SolveContext) -> PruneResult:
    """Structured Thanos (Alg. 2): outlier rows, column scores v_j, closed-form removal (eq. 13)."""
    started = time.perf_counter()
    rows, cols = W.shape
    alpha = cfg.alpha_for(target)
    count = ceil_count(target.sparsity * cols / (1.0 - alpha))  # s = ⌈p·in/(1−α)⌉
    if count >= cols:
        raise ToolkitError(
            f"{target} with alpha={alpha} needs s = ⌈p·in/(1−α)⌉ = {count} of {cols} columns, i.e. "
            f"every column; lower the sparsity or alpha"
        )
    outliers = _outliers(W, H, alpha, cfg)
    pruned_rows = torch.ones(rows, dtype=torch.bool, device=W.device)
    pruned_rows[outliers] = False
    W_rest = W[pruned_rows]  # (out − n_out, in)
    v = (W_rest**2).sum(0) * torch.diagonal(H)  # (in,) eq. (15)
    removed = torch.sort(torch.topk(v, count, largest=False).indices).values  # (s,)
    kept_cols = torch.ones(cols, dtype=torch.bool, device=W.device)
    kept_cols[removed] = False
    perm = torch.cat([removed, torch.nonzero(kept_cols).flatten()])  # S first, then K
    damping, error = float("nan"), 0.0
    if count:
        U, damping = damped_cholesky_inverse(H[perm][:, perm], cfg.damp_frac, ctx)  # Uᵀ U = Ĥ_perm⁻¹
        delta_kept, loss = structured_update(W_rest[:, perm], U, count)
        W_rest[:, perm[count:]] += delta_kept
        W_rest[:, removed] = 0.0
        W[pruned_rows] = W_rest
        error = float(loss.sum())
    keep = torch.ones_like(W, dtype=torch.bool)
    keep[pruned_rows.unsqueeze(1) & ~kept_cols.unsqueeze(0)] = False
    ctx.emit(BlockStep(
        layer=ctx.layer, name=ctx.name, block=0, removed=count * int(pruned_rows.sum()),
        error=error, seconds=time.perf_counter() - started,
    ))
    info = {"outlier_rows": outliers.tolist(), "removed_columns": removed.tolist(), "alpha": alpha}
    return PruneResult(weight=W, keep_mask=keep, damping=damping, info=info)


def prune(W: Tensor, stats: LinearStats, target: Target | None, cfg: ThanosConfig, ctx: SolveContext) -> PruneResult:
    """Prune one linear with Thanos; ``W`` (out, in) is not modified.

    Returns the new float32 weight, the keep-mask (out, in) (outlier rows all True), the final
    damping and ``info`` with ``outlier_rows`` (and ``removed_columns`` for structured).
    Raises :class:`ToolkitError` for impossible targets (all columns, n:m width) and
    :class:`NumericalError` if the damped Hessian cannot be factorised.
    """
    assert target is not None, "a pruning method always gets a sparsity target (MethodSpec.check)"
    W, H = zero_dead_inputs(W.to(SOLVER_DTYPE).clone(), stats.gram.to(SOLVER_DTYPE))
    if isinstance(target, Structured):
        return _prune_structured(W, H, target, cfg, ctx)
    return _prune_blockwise(W, H, target, cfg, ctx)


SPEC = MethodSpec(
    name="thanos",
    fn=prune,
    config=ThanosConfig,
    needs=frozenset({Stat.GRAM}),
    targets=structured_supported(),
    summary="block-wise multi-weight OBS with global residual Wanda mask; outlier rows for n:m/structured",
    sequential="group",
)
