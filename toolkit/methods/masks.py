"""Keep-masks from scores: the pattern each sparsity target asks for (CONTRIBUTING.md R4).

A ``keep_mask`` is a bool tensor of the weight's shape ``(out, in)``, True = weight kept. The
targets themselves (:class:`~toolkit.spec.targets.Unstructured`, :class:`~toolkit.spec.targets.NM`,
:class:`~toolkit.spec.targets.Structured`) and the counts they imply live in :mod:`toolkit.spec.targets`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit.methods.chunks import row_chunks
from toolkit.methods.thanos_update import kth_smallest
from toolkit.spec.targets import NM, Structured, Target, structured_count, unstructured_count


def kth_lowest(scores: Tensor, count: int) -> Tensor:
    """The ``count``-th smallest value of every row of ``scores`` (a flat tensor: of all of it), keepdim.

    ``torch.kthvalue`` copies its input and allocates an int64 index per entry (12 bytes an entry beside the
    scores: 516 MiB for an 11008 × 4096 linear), so rows go through it in the row chunks of
    :func:`~toolkit.methods.chunks.row_chunks`; a flat tensor is bracketed by a sample first and selected within
    the band (:func:`~toolkit.methods.thanos_update.kth_smallest`). Both give exactly ``kthvalue``'s value.
    """
    if scores.dim() == 1:
        return kth_smallest(scores, count).reshape(1)
    rows = scores.reshape(-1, scores.shape[-1])
    parts = [torch.kthvalue(rows[chunk], count, dim=-1, keepdim=True).values
             for chunk in row_chunks(rows.shape[0], rows.shape[1])]
    return torch.cat(parts).reshape(*scores.shape[:-1], 1)


def drop_lowest(scores: Tensor, count: int) -> Tensor:
    """Bool mask (same shape) marking exactly ``count`` lowest entries of every row of ``scores``.

    The threshold is the ``count``-th smallest value (:func:`kth_lowest`, linear time, never a sort); ties
    at the threshold are taken left to right until the count is met (what a stable sort would drop).
    """
    if count <= 0:
        return torch.zeros_like(scores, dtype=torch.bool)
    if count >= scores.shape[-1]:
        return torch.ones_like(scores, dtype=torch.bool)
    threshold = kth_lowest(scores, count)
    mask = scores < threshold
    need = count - mask.sum(-1, keepdim=True)
    ties = scores == threshold
    width = scores.shape[-1]
    rows = (ties.sum(-1, keepdim=True) > need).reshape(-1).nonzero().squeeze(-1)
    if rows.numel():  # the left-most ties only, on the rows that have too many (a 64-bit cumsum of those rows)
        flat_ties = ties.view(-1, width)
        tied = flat_ties[rows]
        flat_ties[rows] = tied & (tied.cumsum(-1) <= need.reshape(-1, 1)[rows])
    return mask.logical_or_(ties)  # exact where a row has no more ties at its threshold than it needs (the usual case)


def keep_topk_per_row(scores: Tensor, prune_per_row: int) -> Tensor:
    """Keep-mask that drops the ``prune_per_row`` lowest ``scores`` of every row.  Shape (out, in)."""
    return drop_lowest(scores, prune_per_row).logical_not_()


def keep_topk_global(scores: Tensor, prune_count: int) -> Tensor:
    """Keep-mask that drops the ``prune_count`` lowest ``scores`` over the whole matrix."""
    return drop_lowest(scores.flatten(), prune_count).logical_not_().view_as(scores)


def keep_nm(scores: Tensor, target: NM) -> Tensor:
    """Keep the ``n`` highest ``scores`` in every group of ``m`` consecutive columns of each row."""
    rows, cols = scores.shape
    grouped = scores.reshape(rows, cols // target.m, target.m)  # (out, in/m, m)
    idx = torch.topk(grouped, target.n, dim=2).indices
    keep = torch.zeros_like(grouped, dtype=torch.bool).scatter_(2, idx, True)
    return keep.reshape(rows, cols)


def keep_columns(column_scores: Tensor, rows: int, remove: int) -> Tensor:
    """Keep-mask (rows, in) removing the ``remove`` input columns with the lowest score."""
    keep_cols = torch.ones_like(column_scores, dtype=torch.bool)
    if remove > 0:
        keep_cols[torch.topk(column_scores, remove, largest=False).indices] = False
    return keep_cols.unsqueeze(0).expand(rows, -1).clone()


def keep_mask_from_scores(scores: Tensor, target: Target, group: str = "row") -> Tensor:
    """Keep-mask meeting ``target`` that keeps the highest ``scores``.

    ``group`` is the comparison group for unstructured targets: ``"row"`` (each output row is
    exactly p sparse, Wanda) or ``"matrix"`` (one threshold over the whole matrix, magnitude).
    Structured targets score a column by the mean of its scores over the rows.
    """
    if isinstance(target, NM):
        return keep_nm(scores, target)
    if isinstance(target, Structured):
        return keep_columns(scores.mean(0), scores.shape[0], structured_count(target, scores.shape[1]))
    if group == "row":
        return keep_topk_per_row(scores, int(scores.shape[1] * target.sparsity))
    return keep_topk_global(scores, unstructured_count(target, scores.numel()))


def nm_violations(keep_mask: Tensor, target: NM) -> int:
    """Number of m-groups of ``keep_mask`` holding more than n kept weights (0 = valid)."""
    rows, cols = keep_mask.shape
    counts = keep_mask.reshape(rows, cols // target.m, target.m).sum(2)
    return int((counts > target.n).sum())
