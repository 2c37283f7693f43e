"""PruneLab's integer grids written as GGUF blocks, code for code (NumPy; no rounding of the weights).

A GGUF block holds 32 consecutive inputs of one row (``ne0`` is the input dimension). Three block
types are grids PruneLab solves on:

- ``Q4_0``: one fp16 scale d, 16 bytes of 4-bit codes; ŵ = (q − 8) · d.
- ``Q4_1``: fp16 d and fp16 minimum m, 16 bytes of 4-bit codes; ŵ = q · d + m.
- ``Q8_0``: fp16 d and 32 signed bytes; ŵ = q · d.

A PruneLab state dequantizes as ŵ = (q − z) · s per group (:mod:`toolkit.methods.quant_grid`). When
its group width is a multiple of 32 (or one group per row of a multiple of 32 inputs), each GGUF
block lies inside one group and takes that group's s and z:

- asymmetric, b ≤ 4 bits → Q4_1 with d = s, m = −z · s and the codes as they are;
- symmetric, b ≤ 4 bits (z = 2^(b−1)) → Q4_0 with d = s and codes q − z + 8;
- symmetric, b ≤ 8 bits → Q8_0 with d = s and codes q − z.

So the GGUF weights equal PruneLab's dequantized weights up to the fp16 rounding of d (and of m).
Nibbles are packed as llama.cpp does: byte j of a block holds input j (low) and input j + 16 (high).
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType

BLOCK = 32  # inputs per GGUF block of the three types below
Q4_0, Q4_1, Q8_0 = GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q8_0


def group_columns(group_size: int, columns: int) -> int:
    """Inputs per group of a stored state (0 or wider than the row: the whole row)."""
    return columns if group_size == 0 or group_size >= columns else group_size


def exact_type(bits: int, group_size: int, symmetric: bool, columns: int) -> GGMLQuantizationType | None:
    """The block type that holds this grid code for code, or None (then the weights must be re-quantized).

    The group width must be a multiple of 32 (so each block lies in one group) and ``columns`` too.
    """
    width = group_columns(group_size, columns)
    if columns % BLOCK or width % BLOCK:
        return None
    return next((qtype for qtype in (Q4_0, Q4_1, Q8_0) if holds(qtype, bits, symmetric)), None)


def holds(qtype: GGMLQuantizationType, bits: int, symmetric: bool) -> bool:
    """Whether ``qtype`` holds a grid of ``bits`` (and symmetry) code for code (given block-aligned groups)."""
    if qtype == Q4_1:
        return bits <= 4 and not symmetric
    if qtype == Q4_0:
        return bits <= 4 and symmetric
    if qtype == Q8_0:
        return bits <= 8 and symmetric
    return False


def _per_block(values: np.ndarray, width: int, columns: int) -> np.ndarray:
    """(rows, groups) → (rows, blocks, 1): each block's group value."""
    blocks = columns // BLOCK
    group_of_block = (np.arange(blocks) * BLOCK) // width
    return values[:, group_of_block][..., None]


def _nibbles(codes: np.ndarray) -> np.ndarray:
    """(rows, blocks, 32) codes in [0, 16) → (rows, blocks, 16) bytes: input j low, input j + 16 high."""
    codes = codes.astype(np.uint8)
    return codes[..., :16] | (codes[..., 16:] << np.uint8(4))


def _fp16_bytes(values: np.ndarray) -> np.ndarray:
    """(rows, blocks, 1) float → (rows, blocks, 2) bytes of fp16."""
    return np.ascontiguousarray(values.astype(np.float16)).view(np.uint8)


def pack(codes: np.ndarray, scales: np.ndarray, zeros: np.ndarray, bits: int, group_size: int,
         qtype: GGMLQuantizationType) -> np.ndarray:
    """A state's codes (rows, in) uint8 with scales and zeros (rows, groups) as ``qtype`` blocks.

    Returns (rows, in / 32 · bytes per block) uint8, the layout ``GGUFWriter.add_tensor(raw_dtype=qtype)``
    takes. The grid must be one ``qtype`` holds (:func:`exact_type`, :func:`holds`).
    """
    rows, columns = codes.shape
    width = group_columns(group_size, columns)
    if columns % BLOCK or width % BLOCK:
        raise ValueError(f"groups of {width} over {columns} inputs do not align with {BLOCK}-input blocks")
    q = codes.reshape(rows, columns // BLOCK, BLOCK).astype(np.int16)
    s = _per_block(scales.astype(np.float32), width, columns)
    z = _per_block(np.rint(zeros).astype(np.int16), width, columns)
    if qtype == Q4_1:
        return np.concatenate([_fp16_bytes(s), _fp16_bytes(-z * s), _nibbles(q)], axis=-1).reshape(rows, -1)
    if qtype == Q4_0:
        return np.concatenate([_fp16_bytes(s), _nibbles(q - z + 8)], axis=-1).reshape(rows, -1)
    if qtype == Q8_0:
        signed = (q - z).astype(np.int8).view(np.uint8)
        return np.concatenate([_fp16_bytes(s), signed], axis=-1).reshape(rows, -1)
    raise ValueError(f"{qtype.name} is not a block type PruneLab writes code for code")
