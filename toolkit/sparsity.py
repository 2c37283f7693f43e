"""Sparsity targets: parse "50%", "0.5", "2:4", "structured:30%"; validate; build keep-masks.

Vocabulary (STYLE R4): ``sparsity`` is the fraction of zeros in [0, 1); a ``keep_mask`` is a bool
tensor with True = weight kept. Weights are ``(out, in)``: rows are outputs, columns are inputs.

Targets:
- :class:`Unstructured` ``p``: a fraction p of the weights is zero (the comparison group is the
  method's: per output row for Wanda, per column block for SparseGPT, the whole matrix for
  magnitude and FISTAPruner).
- :class:`NM` ``n:m``: at most n non-zeros in every m consecutive weights of a row.
- :class:`Structured` ``p``: a fraction p of the input columns is removed entirely.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from toolkit.errors import ToolkitError


@dataclass(frozen=True, slots=True)
class Unstructured:
    """A fraction ``sparsity`` of the weights is zero."""

    sparsity: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.sparsity < 1.0:
            raise ToolkitError(f"sparsity {self.sparsity} is outside [0, 1): use e.g. 50% or 0.5")

    @property
    def fraction(self) -> float:
        """Expected fraction of zeros."""
        return self.sparsity

    def __str__(self) -> str:
        return f"{self.sparsity * 100:g}%"


@dataclass(frozen=True, slots=True)
class NM:
    """At most ``n`` non-zeros in every ``m`` consecutive weights of a row (2:4 keeps 2 of 4)."""

    n: int
    m: int

    def __post_init__(self) -> None:
        if not (0 < self.n < self.m):
            raise ToolkitError(f"n:m pattern {self.n}:{self.m} needs 0 < n < m, e.g. 2:4 or 4:8")

    @property
    def fraction(self) -> float:
        """Expected fraction of zeros, 1 - n/m."""
        return 1.0 - self.n / self.m

    def __str__(self) -> str:
        return f"{self.n}:{self.m}"


@dataclass(frozen=True, slots=True)
class Structured:
    """A fraction ``sparsity`` of the input columns of each linear is removed."""

    sparsity: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.sparsity < 1.0:
            raise ToolkitError(
                f"structured sparsity {self.sparsity} is outside [0, 1): use e.g. structured:30%"
            )

    @property
    def fraction(self) -> float:
        """Expected fraction of zeros (whole columns)."""
        return self.sparsity

    def __str__(self) -> str:
        return f"structured:{self.sparsity * 100:g}%"


Target = Unstructured | NM | Structured


def _parse_fraction(text: str) -> float:
    text = text.strip()
    try:
        value = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise ToolkitError(
            f"cannot read sparsity {text!r}: use 50%, 0.5, 2:4, 4:8 or structured:30%"
        ) from None
    if not math.isfinite(value):
        raise ToolkitError(f"sparsity {text!r} is not a finite number")
    return value


def parse_sparsity(text: str | float | Target) -> Target:
    """Parse a user's sparsity string into a :data:`Target`.

    >>> parse_sparsity("50%"), parse_sparsity("2:4"), parse_sparsity("structured:30%")
    (Unstructured(sparsity=0.5), NM(n=2, m=4), Structured(sparsity=0.3))
    """
    if isinstance(text, Unstructured | NM | Structured):
        return text
    if isinstance(text, int | float):
        return Unstructured(float(text))
    text = str(text).strip().lower()
    if text.startswith("structured:"):
        return Structured(_parse_fraction(text.split(":", 1)[1]))
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise ToolkitError(f"cannot read n:m pattern {text!r}: use e.g. 2:4 or 4:8")
        return NM(int(parts[0]), int(parts[1]))
    return Unstructured(_parse_fraction(text))


def validate_for_shape(target: Target, shape: tuple[int, int]) -> None:
    """Raise a :class:`ToolkitError` if ``target`` cannot be met by a ``(out, in)`` weight."""
    columns = shape[1]
    if isinstance(target, NM) and columns % target.m:
        raise ToolkitError(
            f"n:m pattern {target} needs the input width to be divisible by {target.m}, "
            f"but a linear has {columns} inputs; choose an m that divides {columns}"
        )
    if isinstance(target, Structured) and structured_count(target, columns) >= columns:
        raise ToolkitError(f"{target} would remove every column of a linear with {columns} inputs")


def unstructured_count(target: Unstructured, numel: int) -> int:
    """Number of weights to zero out of ``numel`` (rounded down, as the reference codes do)."""
    return int(numel * target.sparsity)


def structured_count(target: Structured, columns: int) -> int:
    """Number of input columns to remove out of ``columns``."""
    return int(columns * target.sparsity)


def drop_lowest(scores: Tensor, count: int) -> Tensor:
    """Bool mask (same shape) marking exactly ``count`` lowest entries of every row of ``scores``.

    The threshold is the ``count``-th smallest value (``kthvalue``, several times faster than a
    top-k of half the row); ties at the threshold are taken left to right until the count is met.
    """
    if count <= 0:
        return torch.zeros_like(scores, dtype=torch.bool)
    if count >= scores.shape[-1]:
        return torch.ones_like(scores, dtype=torch.bool)
    threshold = torch.kthvalue(scores, count, dim=-1, keepdim=True).values
    drop = scores < threshold
    ties = scores == threshold
    need = count - drop.sum(-1, keepdim=True)
    return drop | (ties & (torch.cumsum(ties, dim=-1) <= need))


def keep_topk_per_row(scores: Tensor, prune_per_row: int) -> Tensor:
    """Keep-mask that drops the ``prune_per_row`` lowest ``scores`` of every row.  Shape (out, in)."""
    return ~drop_lowest(scores, prune_per_row)


def keep_topk_global(scores: Tensor, prune_count: int) -> Tensor:
    """Keep-mask that drops the ``prune_count`` lowest ``scores`` over the whole matrix."""
    return ~drop_lowest(scores.flatten(), prune_count).view_as(scores)


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
