"""The quantization core: remainder groups, constant groups, bits per weight."""

from __future__ import annotations

import pytest
import torch

from toolkit.methods.quant_grid import bits_per_weight, dequantize, num_groups, project, quantize
from toolkit.spec.compression import QuantSpec


def test_a_remainder_group_gets_its_own_grid() -> None:
    # 5 columns, g2: groups [0, 1], [2, 3] and the one-column remainder [4]
    W = torch.tensor([[0.0, 0.3, -0.6, 0.6, 0.5]])
    state = quantize(W, QuantSpec(2, 2))
    assert state.scales.shape == (1, 3) and num_groups(QuantSpec(2, 2), 5) == 3
    # group 1: s = 1.2/3 = 0.4, z = round(1.5) = 2 (half to even): codes round(w/0.4) + 2
    assert state.codes[0, 2:4].tolist() == [0, 3]
    assert torch.allclose(dequantize(state)[0, 2:4], torch.tensor([-0.8, 0.4]))
    # the remainder's value is on its own grid, exactly
    assert float(dequantize(state)[0, 4]) == pytest.approx(0.5, abs=1e-7)


@pytest.mark.parametrize("value", (0.5, -0.25, 0.0))
def test_a_constant_group_keeps_its_value(value: float) -> None:
    W = torch.full((3, 8), value)
    assert torch.allclose(project(W, QuantSpec(4, 8)), W, atol=1e-7)


def test_bits_per_weight_counts_scales_and_zero_points_of_every_group() -> None:
    assert bits_per_weight(QuantSpec(4, 128), 256) == pytest.approx(4 + (16 + 4) / 128)
    assert bits_per_weight(QuantSpec(4, 128, symmetric=True), 256) == pytest.approx(4 + 16 / 128)
    # 129 columns: two groups per row, the second a remainder of one column
    assert bits_per_weight(QuantSpec(4, 128), 129) == pytest.approx(4 + 2 * 20 / 129)
