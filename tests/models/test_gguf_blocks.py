"""PruneLab grids written as GGUF blocks: code for code, read back by the gguf package's own dequantizer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import quants

from toolkit.methods.quant_grid import dequantize, quantize
from toolkit.models import gguf_blocks
from toolkit.spec.compression import QuantSpec


def _state(bits: int, group: int, symmetric: bool, rows: int = 24, cols: int = 256, seed: int = 0):
    torch.manual_seed(seed)
    W = torch.randn(rows, cols) * torch.linspace(0.1, 2.0, cols)  # groups of different ranges
    state = quantize(W, QuantSpec(bits=bits, group_size=group, symmetric=symmetric))
    return state, dequantize(state).numpy()


@pytest.mark.parametrize(("bits", "group", "symmetric", "qtype"), [
    (4, 32, False, gguf_blocks.Q4_1), (4, 32, True, gguf_blocks.Q4_0), (4, 128, False, gguf_blocks.Q4_1),
    (4, 0, True, gguf_blocks.Q4_0), (3, 64, False, gguf_blocks.Q4_1), (3, 32, True, gguf_blocks.Q4_0),
    (2, 32, False, gguf_blocks.Q4_1), (8, 32, True, gguf_blocks.Q8_0), (8, 0, True, gguf_blocks.Q8_0)])
def test_blocks_equal_the_grid_up_to_fp16_scales(bits: int, group: int, symmetric: bool, qtype) -> None:
    state, weight = _state(bits, group, symmetric)
    assert gguf_blocks.exact_type(bits, group, symmetric, weight.shape[1]) == qtype
    codes, scales, zeros = state.codes.numpy(), state.scales.numpy(), state.zeros.numpy()
    data = gguf_blocks.pack(codes, scales, zeros, bits, group, qtype)
    back = quants.dequantize(data, qtype).reshape(weight.shape)
    # the only loss is fp16 rounding of d (and m): relative 2^-11 of a group's scale per code step
    step = np.repeat(scales, gguf_blocks.group_columns(group, weight.shape[1]), axis=1)[:, :weight.shape[1]]
    bound = 2.0 ** -10 * step * (2 ** bits)
    assert np.all(np.abs(back - weight) <= bound + 1e-7)


def test_nibbles_follow_llama_cpp_order() -> None:
    """Byte j of a block holds input j in its low nibble and input j + 16 in its high one."""
    codes = np.arange(32, dtype=np.uint8)[None, :] % 16
    data = gguf_blocks.pack(codes, np.ones((1, 1), np.float32), np.zeros((1, 1), np.float32), 4, 32,
                            gguf_blocks.Q4_1)
    assert data.shape == (1, 20)  # fp16 d, fp16 m, 16 bytes
    assert data[0, 4] == (0 | (16 % 16) << 4) and data[0, 5] == (1 | (17 % 16) << 4)
    assert np.array_equal(quants.dequantize(data, gguf_blocks.Q4_1).ravel(), codes.ravel().astype(np.float32))


@pytest.mark.parametrize(("bits", "group", "symmetric", "cols"), [
    (4, 48, False, 96), (4, 32, False, 100), (8, 32, False, 64), (5, 32, True, 64)])
def test_grids_no_block_holds(bits: int, group: int, symmetric: bool, cols: int) -> None:
    """Groups not aligned with 32 inputs, an asymmetric int8 grid: no type holds them code for code."""
    exact = gguf_blocks.exact_type(bits, group, symmetric, cols)
    assert exact is None or not gguf_blocks.holds(exact, bits, symmetric) or bits == 5
    if bits == 5:  # a symmetric 5-bit grid fits Q8_0's signed bytes
        assert exact == gguf_blocks.Q8_0


def test_holds_matches_the_types() -> None:
    assert gguf_blocks.holds(gguf_blocks.Q4_1, 4, False) and not gguf_blocks.holds(gguf_blocks.Q4_1, 4, True)
    assert gguf_blocks.holds(gguf_blocks.Q4_0, 3, True) and not gguf_blocks.holds(gguf_blocks.Q4_0, 8, True)
    assert gguf_blocks.holds(gguf_blocks.Q8_0, 4, True) and not gguf_blocks.holds(gguf_blocks.Q8_0, 8, False)
