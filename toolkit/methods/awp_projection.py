"""The projections Proj_𝒞 of AWP (Liu et al. 2025, §3; implementation notes §1.5, §1.8, A6-A7).

Weights are (out, in): rows are outputs, columns inputs. Every projection returns an
:class:`Iterate` ``(theta, keep, state)``: the projected weight Θ, the keep-mask of the sparsity
projection (None when nothing is pruned) and the quantization state behind Θ (None when nothing is
quantized; then Θ = dequantize(state) exactly).

- ``Proj_row`` (eq. 5): in every row keep the k = in − ⌊p·in⌋ largest |Z| (Wanda's count, A11);
  n:m keeps the n largest |Z| of every m consecutive inputs of a row (an extension, not in the
  paper).
- ``Proj_INTb``: round-to-nearest on the asymmetric (or symmetric) min-max grid of
  :mod:`toolkit.methods.quant_grid`, recomputed from the projected matrix at every call (A6), or frozen at the
  first grid the projector computed (``frozen=True``), or the nearer of the two per group
  (``nearest=True``): the grid of Z or the current iterate's grid, whichever puts the rounded
  group closer to Z (:func:`nearer_grid`).
- joint (§1.5c): ``prune_first`` = Proj_INT(Proj_row(Z)) (the paper's experiments: the grid is the
  min-max of the pruned matrix, zeros included), ``quant_first`` = Proj_row(Proj_INT(Z)) (the
  paper's other option: the grid of Z, then pruning). Either way pruned weights get the group's
  zero-point code, which dequantizes to exactly 0 (the integer zero point z lies in [0, qmax], so
  (z − z)·s = 0 on every grid).
- sparsity ramp (§1.8, A7): at step t ≤ ``ramp`` the sparsity projection uses the unstructured
  per-row fraction p·t/ramp (p the target's fraction, n:m included: an n:m pattern has no partial
  version), then the target itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from toolkit.methods.masks import keep_nm, keep_topk_per_row
from toolkit.methods.quant_grid import (
    QuantState,
    codes_on_grid,
    dequantize,
    group_width,
    mask_state,
    num_groups,
    quantize,
)
from toolkit.spec.compression import QuantSpec
from toolkit.spec.targets import NM, Unstructured

SparseTarget = Unstructured | NM


@dataclass
class Iterate:
    """One AWP iterate: Θ (out, in) float32, its keep-mask and its quantization state."""

    theta: Tensor
    keep: Tensor | None = None
    state: QuantState | None = None
    feasible: bool = True  # Θ lies in the final constraint set (false during the joint ramp/hold)


@dataclass(frozen=True)
class RowMask:
    """A keep-mask with its float forms (1 on kept weights; 1 on pruned ones), reused between steps."""

    keep: Tensor
    kept: Tensor
    off: Tensor

    @classmethod
    def of(cls, keep: Tensor, dtype: torch.dtype) -> RowMask:
        """The mask ``keep`` (bool) and its two float forms in ``dtype``."""
        kept = keep.to(dtype)
        return cls(keep, kept, 1.0 - kept)


def keep_largest_per_row(scores: Tensor, prune: int, hint: RowMask | None = None) -> Tensor:
    """:func:`~toolkit.methods.masks.keep_topk_per_row` (same mask), with two fast paths.

    ``hint``: a keep-mask with ``in − prune`` True per row (the previous PGD step's). Row i keeps
    exactly the hint's entries when min_{j kept} s_ij > max_{j pruned} s_ij: then the kept set is
    the unique top-k of the row. Only the rows where that fails are selected again. PGD moves few
    weights across the threshold per step, so this replaces a per-row selection by two masked
    reductions; the hint itself is returned when no row moved. Without a hint (or for the failing
    rows): when no row has ties at its threshold, the ``prune`` entries ≤ the ``prune``-th smallest
    are exactly the ones dropped.
    """
    if prune <= 0 or prune >= scores.shape[1]:
        return keep_topk_per_row(scores, prune)
    if hint is not None:
        # scores ≥ 0: the pruned entries' max with kept ones zeroed; the kept entries' min with
        # pruned ones lifted above every score. Arithmetic on float masks (torch.where with ±inf
        # is ~20× slower on CPU); a NaN or inf score makes its row fail the test: selected again.
        pruned_max = (scores * hint.off).amax(dim=1)
        kept_min = torch.addcmul(scores, hint.off, scores.amax() + 1.0).amin(dim=1)
        redo = ~(kept_min > pruned_max)
        if not bool(redo.any()):
            return hint.keep
        rows = redo.nonzero().squeeze(1)
        keep = hint.keep.clone()
        keep[rows] = keep_largest_per_row(scores[rows], prune)
        return keep
    threshold = torch.kthvalue(scores, prune, dim=1, keepdim=True).values
    keep = scores > threshold
    if bool((keep.sum(1) == scores.shape[1] - prune).all()):
        return keep
    return keep_topk_per_row(scores, prune)


def project_rows(Z: Tensor, target: SparseTarget, hint: RowMask | None = None) -> tuple[Tensor, RowMask]:
    """Proj_row: (Z ⊙ keep, keep) keeping the largest |Z| per row (unstructured) or per m-group (n:m).

    ``hint``: the previous step's mask at this target, tried first (unstructured only;
    :func:`keep_largest_per_row`). The result does not depend on it; when the mask did not move,
    the hint's float forms are reused.
    """
    scores = Z.abs()
    if isinstance(target, NM):
        keep = keep_nm(scores, target)
    else:
        keep = keep_largest_per_row(scores, int(Z.shape[1] * target.sparsity), hint)
    mask = hint if hint is not None and keep is hint.keep else RowMask.of(keep, Z.dtype)
    return Z * mask.kept, mask


def project_sparse(Z: Tensor, target: SparseTarget) -> tuple[Tensor, Tensor]:
    """Proj_row without a warm start: (Z ⊙ keep, keep)."""
    P, mask = project_rows(Z, target)
    return P, mask.keep


def group_sq(E: Tensor, spec: QuantSpec) -> Tensor:
    """(out, groups): the sum of E² over each group of ``spec`` (a short last group summed as it is)."""
    rows, cols = E.shape
    width, groups = group_width(spec, cols), num_groups(spec, cols)
    padded = torch.nn.functional.pad(E * E, (0, groups * width - cols))
    return padded.reshape(rows, groups, width).sum(dim=2)


def nearer_grid(Z: Tensor, fitted: QuantState, current: QuantState) -> QuantState:
    """Per group, Z rounded on ``fitted``'s grid (Z's min-max grid) or on ``current``'s, whichever is nearer Z.

    ``current`` is the iterate Θ's own state, so Θ lies on its grid and rounding Z there is at least as near
    Z as Θ is: ‖Proj(Z) − Z‖ ≤ ‖Θ − Z‖ group by group, the inequality behind the descent argument of
    projected gradient. The min-max grid of Z alone breaks it (docs/methods/awp.md, *Why INT3
    stop=gradient diverges*). Ties keep the current grid.
    """
    spec = fitted.spec
    kept = QuantState(codes_on_grid(Z, current.scales, current.zeros, spec), current.scales, current.zeros, spec)
    old = group_sq(Z - dequantize(kept), spec) <= group_sq(Z - dequantize(fitted), spec)  # (out, groups)
    old_cols = old.repeat_interleave(group_width(spec, Z.shape[1]), dim=1)[:, :Z.shape[1]]
    return QuantState(torch.where(old_cols, kept.codes, fitted.codes), torch.where(old, kept.scales, fitted.scales),
                      torch.where(old, kept.zeros, fitted.zeros), spec)


def ramp_target(target: SparseTarget, step: int, ramp: int) -> SparseTarget:
    """The sparsity projected at ``step`` (1-based): fraction·step/ramp per row while step < ramp."""
    if ramp <= 0 or step >= ramp:
        return target
    return Unstructured(target.fraction * step / ramp)


@dataclass
class Projector:
    """Proj_𝒞 for one AWP run: sparsity ``target`` and/or grid ``spec``, with the joint schedule.

    ``ramp``: steps over which the pruned fraction grows from 0 (joint); ``quant_from``: the first
    step whose projection quantizes (joint: ramp + hold + 1; 1 otherwise). Calling it with ``step``
    (1-based) returns the projected iterate; :meth:`finalize` maps any iterate into the final set.
    ``nearest``: each group takes the nearer of Z's own grid and the current iterate's grid
    (:func:`nearer_grid`; the current iterate is passed to the call).
    """

    target: SparseTarget | None
    spec: QuantSpec | None
    ramp: int = 0
    quant_from: int = 1
    order: str = "prune_first"
    frozen: bool = False
    grid: tuple[Tensor, Tensor] | None = None  # the frozen (scales, zeros), set on first use
    nearest: bool = False
    last: tuple[SparseTarget, RowMask] | None = field(default=None, repr=False)  # previous Proj_row

    def sparse(self, Z: Tensor, target: SparseTarget) -> tuple[Tensor, Tensor]:
        """Proj_row(Z) for ``target``, warm-started from the previous step's mask at the same target."""
        hint = self.last[1] if self.last is not None and self.last[0] == target else None
        P, mask = project_rows(Z, target, hint)
        self.last = (target, mask)
        return P, mask.keep

    def quantize(self, Z: Tensor, current: QuantState | None = None) -> QuantState:
        """Proj_INT of Z: codes on the recomputed grid of Z, on the frozen grid, or (``nearest``) per group.

        ``nearest``: per group the nearer of Z's grid and ``current``'s (the iterate's state; None: Z's grid).
        """
        assert self.spec is not None
        if self.frozen and self.grid is not None:
            scales, zeros = self.grid
            return QuantState(codes_on_grid(Z, scales, zeros, self.spec), scales, zeros, self.spec)
        state = quantize(Z, self.spec)
        if self.frozen:
            self.grid = (state.scales, state.zeros)
        if self.nearest and current is not None:
            return nearer_grid(Z, state, current)
        return state

    def joint(self, Z: Tensor, target: SparseTarget, current: QuantState | None = None) -> Iterate:
        """Proj_INT(Proj_row(Z)) or Proj_row(Proj_INT(Z)); pruned codes set to the zero point."""
        if self.order == "prune_first":
            P, keep = self.sparse(Z, target)
            state = mask_state(self.quantize(P, current), keep)
        else:
            state = self.quantize(Z, current)
            _, keep = self.sparse(dequantize(state), target)
            state = mask_state(state, keep)
        return Iterate(dequantize(state), keep, state)

    def __call__(self, Z: Tensor, step: int, current: Iterate | None = None) -> Iterate:
        """Θ^(step) = Proj_𝒞(Z^(step−1)) under the schedule; ``current`` = Θ^(step−1) (used by ``nearest``)."""
        quantizes = self.spec is not None and step >= self.quant_from
        state_now = current.state if current is not None else None
        if self.target is None:
            state = self.quantize(Z, state_now)
            return Iterate(dequantize(state), None, state)
        target = ramp_target(self.target, step, self.ramp)
        if quantizes:
            return self.joint(Z, target, state_now)
        P, keep = self.sparse(Z, target)
        return Iterate(P, keep, None, feasible=self.spec is None and target == self.target)

    def finalize(self, iterate: Iterate) -> Iterate:
        """Map an iterate into the final constraint set.

        An infeasible one is projected with the full target (and grid); a feasible one gets its mask
        re-applied to Θ and the codes (§1.8).
        """
        if not iterate.feasible:
            if self.target is None:
                state = self.quantize(iterate.theta)
                return Iterate(dequantize(state), None, state)
            if self.spec is not None:
                return self.joint(iterate.theta, self.target)
            P, keep = project_sparse(iterate.theta, self.target)
            return Iterate(P, keep, None)
        if iterate.keep is None:
            return iterate
        state = None if iterate.state is None else mask_state(iterate.state, iterate.keep)
        theta = iterate.theta * iterate.keep if state is None else dequantize(state)
        return Iterate(theta, iterate.keep, state)
