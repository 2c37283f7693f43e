"""Sparsity targets: parsing, bad input, and the keep-mask helpers (exact counts, n:m pattern)."""

from __future__ import annotations

import pytest
import torch

from toolkit.errors import ToolkitError
from toolkit.methods.masks import keep_mask_from_scores, keep_nm, nm_violations
from toolkit.spec.targets import NM, Structured, Unstructured, parse_sparsity, validate_for_shape


@pytest.mark.parametrize(("text", "expected"), [
    ("50%", Unstructured(0.5)), ("0.7", Unstructured(0.7)), (0.3, Unstructured(0.3)), ("2:4", NM(2, 4)),
    ("4:8", NM(4, 8)), ("structured:30%", Structured(0.3)), ("Structured:0.25", Structured(0.25)),
])
def test_parse(text: str, expected: object) -> None:
    assert parse_sparsity(text) == expected


@pytest.mark.parametrize("text", ["1.5", "100%", "-0.1", "4:2", "2:2", "0:4", "a:b", "2:4:8", "half", "nan",
                                  "structured:100%"])
def test_bad_sparsity_is_a_toolkit_error(text: str) -> None:
    with pytest.raises(ToolkitError):
        parse_sparsity(text)


def test_validate_for_shape() -> None:
    validate_for_shape(NM(2, 4), (8, 16))
    with pytest.raises(ToolkitError, match="divisible by 8"):
        validate_for_shape(NM(4, 8), (8, 12))


def test_hand_case_row_and_matrix_groups() -> None:
    scores = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]])
    row = keep_mask_from_scores(scores, Unstructured(0.5), group="row")
    assert row.tolist() == [[False, False, True, True], [False, False, True, True]]
    matrix = keep_mask_from_scores(scores, Unstructured(0.5), group="matrix")
    assert matrix.tolist() == [[False, False, False, False], [True, True, True, True]]


def test_nm_hand_case() -> None:
    scores = torch.tensor([[4.0, 1.0, 3.0, 2.0, 0.0, 9.0, 8.0, 7.0]])
    keep = keep_nm(scores, NM(2, 4))
    assert keep.tolist() == [[True, False, True, False, False, True, True, False]]
    assert nm_violations(keep, NM(2, 4)) == 0
    assert nm_violations(torch.ones(1, 8, dtype=torch.bool), NM(2, 4)) == 2


def test_structured_removes_whole_columns() -> None:
    scores = torch.rand(6, 10)
    keep = keep_mask_from_scores(scores, Structured(0.3))
    removed = (~keep).all(0)
    assert int(removed.sum()) == 3
    assert bool(keep[:, ~removed].all())
