"""Where two keep-masks agree, cell by cell, and tiles of a mask at native resolution (numpy, no torch).

Masks are ``keep_mask`` arrays, bool ``(out, in)``, True = weight kept (CONTRIBUTING.md R4). Two masks
``a`` (run A) and ``b`` (run B) put every weight in one of four categories:

====  =====================  ==============
code  category               test
====  =====================  ==============
0     pruned by both         ¬a ∧ ¬b
1     kept by B only         ¬a ∧ b
2     kept by A only         a ∧ ¬b
3     kept by both           a ∧ b
====  =====================  ==============

i.e. ``code = 2·a + b``. A *tile* is a ``size × size`` window of the matrix at native
resolution (one cell per weight), placed by its top-left row and column; a tile at the edge is
cut to the matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolkit.errors import ToolkitError

CATEGORIES = ("pruned by both", "kept by B only", "kept by A only", "kept by both")  # index = code
TILE_SIZES = (32, 64, 128, 256)


@dataclass(frozen=True, slots=True)
class Tile:
    """A window ``rows × cols`` of an (out, in) matrix whose top-left weight is (``row``, ``col``)."""

    row: int
    col: int
    rows: int
    cols: int

    @property
    def label(self) -> str:
        """``rows 0–127, columns 256–383`` (inclusive, counted from 0)."""
        return f"rows {self.row}–{self.row + self.rows - 1}, columns {self.col}–{self.col + self.cols - 1}"

    def cut(self, matrix: np.ndarray) -> np.ndarray:
        """The tile's cells of ``matrix`` (a view, no copy)."""
        return matrix[self.row:self.row + self.rows, self.col:self.col + self.cols]


def tile(shape: tuple[int, ...], row: int, col: int, size: int) -> Tile:
    """The ``size × size`` tile at (``row``, ``col``) of a matrix of ``shape``, cut at the edges.

    Raises :class:`ToolkitError` when the size is < 1 or the corner lies outside the matrix.

    >>> tile((576, 1536), 512, 1500, 128)
    Tile(row=512, col=1500, rows=64, cols=36)
    """
    out, inputs = int(shape[0]), int(shape[1])
    if size < 1:
        raise ToolkitError(f"the tile size must be a whole number ≥ 1, got {size}; pick e.g. 128")
    if not 0 <= row < out:
        raise ToolkitError(f"tile row {row} is outside the {out} output rows; pick 0 to {out - 1}")
    if not 0 <= col < inputs:
        raise ToolkitError(f"tile column {col} is outside the {inputs} input columns; pick 0 to {inputs - 1}")
    return Tile(row, col, min(size, out - row), min(size, inputs - col))


def categories(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Category code ``2·a + b`` per weight (see the module table), uint8 of the masks' shape.

    >>> categories(np.array([[0, 0, 1, 1]], bool), np.array([[0, 1, 0, 1]], bool)).tolist()
    [[0, 1, 2, 3]]
    """
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if a.shape != b.shape:
        raise ToolkitError(f"masks have different shapes {a.shape} vs {b.shape}; compare the same linear of one model")
    return (a.astype(np.uint8) << 1) | b.astype(np.uint8)


def category_counts(codes: np.ndarray) -> list[int]:
    """How many weights fall in each category, in :data:`CATEGORIES` order.

    >>> category_counts(np.array([[0, 3, 3, 2]], np.uint8))
    [1, 0, 1, 2]
    """
    return [int(n) for n in np.bincount(np.asarray(codes, dtype=np.uint8).ravel(), minlength=4)[:4]]
