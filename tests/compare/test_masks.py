"""Mask overlap maths (toolkit.compare.masks) on hand-checkable masks and a synthetic run store."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.synthetic_runs import write_run
from toolkit.compare import masks as compare
from toolkit.errors import ToolkitError
from toolkit.store.runs import list_runs, open_run

A = np.array([[1, 1, 0, 0, 1, 0, 1, 0]], dtype=bool)
B = np.array([[1, 0, 1, 0, 1, 0, 1, 0]], dtype=bool)


def test_iou_hamming_group_agreement_by_hand() -> None:
    assert compare.iou(A, B) == pytest.approx(3 / 5)  # kept in both {0,4,6}; in either {0,1,2,4,6}
    assert compare.hamming(A, B) == pytest.approx(2 / 8)
    assert compare.group_agreement(A, B, m=4) == 0.5  # first group differs, second agrees
    assert compare.group_agreement(A, B, m=2) == 0.5
    assert compare.iou(A, A) == 1.0 and compare.hamming(A, A) == 0.0 and compare.group_agreement(A, A, 8) == 1.0
    nothing = np.zeros((2, 4), dtype=bool)
    assert compare.iou(nothing, nothing) == 1.0


def test_sparsity_per_row_and_column() -> None:
    mask = np.array([[1, 0, 0, 0], [1, 1, 1, 1]], dtype=bool)
    assert compare.sparsity(mask) == pytest.approx(3 / 8)
    assert list(compare.row_sparsity(mask)) == [0.75, 0.0]
    assert list(compare.column_sparsity(mask)) == [0.0, 0.5, 0.5, 0.5]


def test_user_errors_say_what_to_change() -> None:
    with pytest.raises(ToolkitError, match="different shapes"):
        compare.iou(A, np.ones((2, 8), dtype=bool))
    with pytest.raises(ToolkitError, match="must divide the input width 8"):
        compare.group_agreement(A, B, m=3)
    with pytest.raises(ToolkitError, match="2-D"):
        compare.hamming(np.ones(4), np.ones(4))
    assert math.isnan(compare.overlap(A, B, m=3)["group_agreement"])
    assert compare.overlap(A, B)["sparsity_a"] == 0.5


def test_runs_of_one_model(tmp_path: Path) -> None:
    write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%"}, seed=1)
    write_run(tmp_path, {"model": "tiny-llama", "method": "sparsegpt", "sparsity": "50%"}, seed=2)
    records = list_runs(tmp_path)
    masks = compare.load_masks(records, 1, "mlp.down_proj")
    assert len(masks) == 2 and all(m.shape == (16, 8) for m in masks.values())
    (row,) = compare.pairwise(masks, m=4)
    assert " vs " in row["pair"] and 0 < row["iou"] < 1 and 0 < row["hamming"] < 1
    rows = compare.all_linears(records, m=4)
    assert [(r["layer"], r["name"]) for r in rows] == [(0, "mlp.down_proj"), (0, "self_attn.q_proj"),
                                                       (1, "mlp.down_proj"), (1, "self_attn.q_proj")]


def test_runs_of_different_models_or_shapes_refused(tmp_path: Path) -> None:
    write_run(tmp_path / "a", {"model": "tiny-llama", "method": "wanda", "sparsity": "50%"})
    write_run(tmp_path / "a", {"model": "tiny-opt", "method": "wanda", "sparsity": "50%"})
    with pytest.raises(ToolkitError, match="different models"):
        compare.load_masks(list_runs(tmp_path / "a"), 0, "mlp.down_proj")
    write_run(tmp_path / "b", {"model": "x", "method": "wanda", "sparsity": "50%"})
    write_run(tmp_path / "b", {"model": "x", "method": "magnitude", "sparsity": "50%"},
              shapes={"self_attn.q_proj": (8, 16), "mlp.down_proj": (16, 16)})
    with pytest.raises(ToolkitError, match="different shapes"):
        compare.load_masks(list_runs(tmp_path / "b"), 0, "mlp.down_proj")
    with pytest.raises(ToolkitError, match="two or more"):
        compare.check_comparable(list_runs(tmp_path / "b")[:1])


def test_run_without_masks_refused(tmp_path: Path) -> None:
    path = write_run(tmp_path, {"model": "x", "method": "wanda", "sparsity": "50%"})
    write_run(tmp_path, {"model": "x", "method": "magnitude", "sparsity": "50%"})
    for file in (path / "masks").iterdir():
        file.unlink()
    with pytest.raises(ToolkitError, match=r"damaged \(4 of 4 mask files are missing"):
        compare.check_comparable([open_run(p) for p in sorted(tmp_path.iterdir())])
