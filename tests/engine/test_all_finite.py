"""The solve's finiteness check by blocks of rows finds a NaN or Inf in any block, as ``isfinite(W).all()`` does."""

from __future__ import annotations

import pytest
import torch

from toolkit.engine.solve import all_finite
from toolkit.methods import chunks


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("row", [0, 7, 40])
def test_all_finite_finds_a_bad_entry_in_any_block(monkeypatch: pytest.MonkeyPatch, bad: float, row: int) -> None:
    monkeypatch.setattr(chunks, "ROW_CHUNK_ELEMENTS", 3 * 16)  # 3 rows a block: 14 blocks, the last one short
    W = torch.randn(41, 16)
    assert all_finite(W)
    W[row, 5] = bad
    assert not all_finite(W)
    assert all_finite(W) == bool(torch.isfinite(W).all())
