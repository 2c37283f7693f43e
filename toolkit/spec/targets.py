"""Sparsity targets: parse "50%", "0.5", "2:4", "structured:30%"; validate; count. Torch-free.

Vocabulary (CONTRIBUTING.md R4): ``sparsity`` is the fraction of zeros in [0, 1); a ``keep_mask`` is
a bool tensor with True = weight kept (built from scores in :mod:`toolkit.methods.masks`). Weights
are ``(out, in)``: rows are outputs, columns are inputs.

Targets:
- :class:`Unstructured` ``p``: a fraction p of the weights is zero (the comparison group is the
  method's: per output row for Wanda, per column block for SparseGPT, the whole matrix for
  magnitude and FISTAPruner).
- :class:`NM` ``n:m``: at most n non-zeros in every m consecutive weights of a row.
- :class:`Structured` ``p``: a fraction p of the input columns is removed entirely; ``structured:N layers``
  counts whole decoder layers instead (depth pruning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True, repr=False)
class Structured:
    """A fraction ``sparsity`` of the input columns of each linear is removed.

    ``layers`` > 0 is a count of whole decoder layers instead (``structured:4 layers``, depth
    pruning); its ``sparsity`` is then 0 (the fraction depends on the model's depth).
    """

    sparsity: float
    layers: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.sparsity < 1.0:
            raise ToolkitError(
                f"structured sparsity {self.sparsity} is outside [0, 1): use e.g. structured:30% "
                "(or structured:4 layers with --method depth)"
            )
        if self.layers < 0 or (self.layers and self.sparsity):
            raise ToolkitError(f"cannot remove {self.layers} layers: use e.g. structured:4 layers")

    @property
    def fraction(self) -> float:
        """Expected fraction of zeros (whole columns); 0 for a count of layers."""
        return self.sparsity

    def __str__(self) -> str:
        if self.layers:
            return f"structured:{self.layers} layer{'s' if self.layers != 1 else ''}"
        return f"structured:{self.sparsity * 100:g}%"

    def __repr__(self) -> str:
        count = f", layers={self.layers}" if self.layers else ""
        return f"Structured(sparsity={self.sparsity}{count})"


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
        return _parse_structured(text.split(":", 1)[1])
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise ToolkitError(f"cannot read n:m pattern {text!r}: use e.g. 2:4 or 4:8")
        return NM(int(parts[0]), int(parts[1]))
    return Unstructured(_parse_fraction(text))


def _parse_structured(text: str) -> Structured:
    """``30%``, ``0.3`` (a fraction) or ``4 layers`` (a count of decoder layers).

    >>> _parse_structured("4 layers"), _parse_structured("1layer")
    (Structured(sparsity=0.0, layers=4), Structured(sparsity=0.0, layers=1))
    """
    raw = text.strip()
    word = raw.rstrip("s").rstrip()
    if word.endswith("layer"):
        count = word[: -len("layer")].strip()
        if not count.isdigit() or int(count) == 0:
            raise ToolkitError(f"cannot remove {count or 'no'!s} layers ({text!r}): give a count ≥ 1, "
                               "e.g. structured:4 layers")
        return Structured(0.0, int(count))
    return Structured(_parse_fraction(raw))


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


