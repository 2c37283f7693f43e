"""Methods marked ``reads_weight_only`` get the layer's weight itself (no copy): they must never write into it.

The engine hands such a method the parameter's own float32 data (toolkit/engine/solve.py) and keeps using it as the
"before" weight of the error and the report, so one write would corrupt both. Wanda scores and selects a block of rows
at a time (``keep_mask_by_rows``): its mask must equal the whole-matrix score's, ties and n:m included.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers.stats import correlated_stats
from toolkit.methods import get_method
from toolkit.methods.base import SolveContext
from toolkit.methods.masks import keep_mask_from_scores
from toolkit.methods.wanda import keep_mask_by_rows, wanda_scores
from toolkit.spec.targets import NM, Structured, Unstructured

READERS = ("magnitude", "wanda", "ria")
TARGETS = [Unstructured(0.5), NM(2, 4), Structured(0.25)]


def test_the_readers_are_marked_and_the_others_get_a_copy() -> None:
    assert all(get_method(name).reads_weight_only for name in READERS)
    assert not get_method("sparsegpt").reads_weight_only  # updates W in place: it must get a copy


@pytest.mark.parametrize("name", READERS)
@pytest.mark.parametrize("target", TARGETS, ids=str)
def test_a_reader_never_writes_into_the_weight(name: str, target: object) -> None:
    spec = get_method(name)
    if not spec.supports(target):  # type: ignore[arg-type]
        pytest.skip(f"{name} does not support {target}")
    _, stats = correlated_stats(32, tokens=256)
    W = torch.randn(40, 32, generator=torch.Generator().manual_seed(2))
    before = W.clone()
    result = spec.fn(W, stats, target, spec.make_config({}), SolveContext())
    assert torch.equal(W, before)
    assert result.weight.data_ptr() != W.data_ptr()  # the result is a tensor of its own


@pytest.mark.parametrize("target", TARGETS, ids=str)
def test_wanda_by_row_blocks_equals_the_whole_matrix(monkeypatch: pytest.MonkeyPatch, target: object) -> None:
    _, stats = correlated_stats(32, tokens=256)
    W = torch.randn(50, 32, generator=torch.Generator().manual_seed(3))
    W[7, :8] = W[7, 8:16]  # ties inside a row
    whole = keep_mask_from_scores(wanda_scores(W, stats), target, group="row")  # type: ignore[arg-type]
    monkeypatch.setattr("toolkit.methods.chunks.ROW_CHUNK_ELEMENTS", 3 * 32)  # blocks of 3 rows, the last one short
    assert torch.equal(keep_mask_by_rows(W, stats, target), whole)  # type: ignore[arg-type]
