"""Group-wise integer weight quantization as pure tensor functions (the quantization core).

Weights are ``(out, in)``; groups are ``group_size`` consecutive inputs of one row (AWQ/GPTQ
layout), the last group of a row holding the remainder when ``group_size`` does not divide ``in``.
``group_size = 0`` is one group per row.

Asymmetric min-max grid (the default; AWQ's ``pseudo_quantize_tensor`` with zero point)::

    qmax = 2**b − 1
    s = max(max(w_g) − min(w_g), 1e-5) / qmax            # one scale per group
    z = clamp(−round(min(w_g) / s), 0, qmax)             # integer zero point
    q = clamp(round(w / s) + z, 0, qmax)                 # integer code
    ŵ = (q − z) · s

A constant group (max − min < 1e-5, such as a one-column remainder group) spans
[min(min w_g, 0), max(max w_g, 0)] instead, so its value lies on the grid (AWQ's clamp alone would
round a constant 0.5 to 1e-5).

Symmetric grid (GPTQ's ``sym=True``): s = 2·max|w_g| / qmax, z = (qmax + 1) / 2.

A :class:`QuantState` holds the codes, scales and zero points; the dequantized weight is derived
from it (:func:`dequantize`), never stored beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from toolkit.methods.chunks import row_chunks
from toolkit.spec.compression import QuantSpec

MIN_SCALE = 1e-5  # AWQ's clamp on (max − min): a constant group still gets a usable grid
SCALE_BITS = 16  # scales are stored in fp16/bf16 by compressed-tensors and the runtimes


@dataclass
class QuantState:
    """Codes (out, in) uint8 in [0, 2**bits), scales and zero points (out, groups) float32."""

    codes: Tensor
    scales: Tensor
    zeros: Tensor
    spec: QuantSpec

    @property
    def shape(self) -> tuple[int, int]:
        """(out, in) of the weight."""
        return (int(self.codes.shape[0]), int(self.codes.shape[1]))

    def to(self, device: torch.device | str) -> QuantState:
        """The same state on ``device``."""
        return QuantState(self.codes.to(device), self.scales.to(device), self.zeros.to(device), self.spec)

    def effective_weight(self) -> Tensor:
        """The (out, in) float32 weight the model computes with: ``dequantize(self)``.

        Subclasses that fold an input scale into the codes, like AWQ's, undo it here.
        """
        return dequantize(self)


def group_width(spec: QuantSpec, columns: int) -> int:
    """Inputs per group: ``spec.group_size``, or the whole row when it is 0 or wider than the row."""
    return columns if spec.group_size == 0 or spec.group_size >= columns else spec.group_size


def num_groups(spec: QuantSpec, columns: int) -> int:
    """Groups per row, ⌈columns / group width⌉ (the last one may be narrower)."""
    return math.ceil(columns / group_width(spec, columns))


def _grouped(W: Tensor, width: int) -> Tensor:
    """(out, groups, width): rows cut into groups.

    A short last group is padded by repeating its last column, which changes neither its min nor its max.
    """
    rows, cols = W.shape
    pad = (-cols) % width
    if pad:
        W = torch.cat([W, W[:, -1:].expand(rows, pad)], dim=1)
    return W.reshape(rows, -1, width)


def _expand(per_group: Tensor, width: int, columns: int) -> Tensor:
    """(out, groups) → (out, in): each group's value repeated over its columns."""
    return per_group.repeat_interleave(width, dim=1)[:, :columns]


def grid(W: Tensor, spec: QuantSpec) -> tuple[Tensor, Tensor]:
    """Scales and zero points (out, groups) of the min-max grid of ``W`` (see the module docstring).

    Computed row chunk by row chunk (each row's grid depends on that row alone), so a float32 copy of a
    bf16 or padded weight exists for one chunk at a time.
    """
    parts = [_grid_rows(W[rows], spec) for rows in row_chunks(W.shape[0], W.shape[1])]
    if len(parts) == 1:
        return parts[0]
    return torch.cat([scales for scales, _ in parts]), torch.cat([zeros for _, zeros in parts])


def _grid_rows(W: Tensor, spec: QuantSpec) -> tuple[Tensor, Tensor]:
    """:func:`grid` of a block of rows."""
    qmax = spec.levels - 1
    Wg = _grouped(W.float(), group_width(spec, W.shape[1]))  # (out, groups, width)
    if spec.symmetric:
        scales = (2 * Wg.abs().amax(dim=2) / qmax).clamp(min=MIN_SCALE / qmax)
        zeros = torch.full_like(scales, (qmax + 1) / 2)
        return scales, zeros
    hi, lo = Wg.amax(dim=2), Wg.amin(dim=2)
    # a constant group (e.g. a one-column remainder group) would get a 1e-5 range that misses its value:
    # span [min(lo, 0), max(hi, 0)] instead, which puts the value on the grid (groups wider than 1e-5 unchanged)
    flat = (hi - lo) < MIN_SCALE
    hi, lo = torch.where(flat, hi.clamp(min=0), hi), torch.where(flat, lo.clamp(max=0), lo)
    scales = (hi - lo).clamp(min=MIN_SCALE) / qmax
    zeros = torch.clamp(-torch.round(lo / scales), 0, qmax)
    return scales, zeros


def codes_on_grid(W: Tensor, scales: Tensor, zeros: Tensor, spec: QuantSpec) -> Tensor:
    """Q = clamp(round(W / s) + z, 0, qmax) for a given grid; (out, in) uint8.

    Row chunk by row chunk, in place within a chunk: the float32 temporaries are one chunk's, never the
    whole weight's (the values are those of the whole-matrix formula, element by element).
    """
    columns = W.shape[1]
    width = group_width(spec, columns)
    codes = torch.empty(W.shape, dtype=torch.uint8, device=W.device)
    for rows in row_chunks(W.shape[0], columns):
        step = W[rows].float() / _expand(scales[rows], width, columns)
        step.round_().add_(_expand(zeros[rows], width, columns)).clamp_(0, spec.levels - 1)
        codes[rows] = step
    return codes


def quantize(W: Tensor, spec: QuantSpec) -> QuantState:
    """Round-to-nearest on the min-max grid of ``W`` (RTN): the state, codes and grid."""
    scales, zeros = grid(W, spec)
    return QuantState(codes_on_grid(W, scales, zeros, spec), scales, zeros, spec)


def dequantize(state: QuantState) -> Tensor:
    """ŵ = (q − z) · s as float32 (out, in)."""
    codes = state.codes
    columns = codes.shape[1]
    width = group_width(state.spec, columns)
    out = torch.empty(codes.shape, dtype=torch.float32, device=codes.device)
    for rows in row_chunks(codes.shape[0], columns):  # one chunk's temporaries at a time
        torch.mul(codes[rows].to(torch.float32, copy=True).sub_(_expand(state.zeros[rows], width, columns)),
                  _expand(state.scales[rows], width, columns), out=out[rows])
    return out


def project(W: Tensor, spec: QuantSpec) -> Tensor:
    """Proj onto the grid recomputed from ``W`` itself: dequantize(quantize(W)) (fake quantization)."""
    return dequantize(quantize(W, spec))


def bits_per_weight(spec: QuantSpec, columns: int) -> float:
    """Storage bits per weight with the grid counted: b + (16-bit scale [+ b-bit zero]) per group."""
    per_group = SCALE_BITS + (0 if spec.symmetric else spec.bits)
    return spec.bits + per_group * num_groups(spec, columns) / columns


def zero_point_codes(state: QuantState) -> Tensor:
    """(out, in) uint8: every weight's group zero point, the code that dequantizes to exactly 0."""
    columns = state.codes.shape[1]
    width = group_width(state.spec, columns)
    out = torch.empty(state.codes.shape, dtype=torch.uint8, device=state.codes.device)
    for rows in row_chunks(out.shape[0], columns):
        out[rows] = _expand(state.zeros[rows], width, columns).round_()
    return out


def mask_state(state: QuantState, keep: Tensor) -> QuantState:
    """The state with the codes of pruned weights (keep False) set to the zero point (exact 0)."""
    codes = torch.where(keep, state.codes, zero_point_codes(state))
    return QuantState(codes, state.scales, state.zeros, state.spec)
