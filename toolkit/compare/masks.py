"""Keep-mask comparison in numpy (no torch): overlap measures and the checks that make them valid.

Masks are ``keep_mask`` arrays, bool ``(out, in)``, True = weight kept (CONTRIBUTING.md R4), as
:meth:`toolkit.store.runs.RunRecord.load_mask` returns them. Measures between two masks ``a``, ``b``:

- **IoU** of the kept sets: |a ∧ b| / |a ∨ b| (1 when both keep nothing).
- **Hamming distance**: the fraction of positions where ``a`` and ``b`` differ (0 = identical).
- **n:m group agreement**: the fraction of groups of ``m`` consecutive weights of a row (the
  groups an n:m pattern is chosen in) where both masks keep exactly the same weights.
- **Chance IoU** (:func:`chance_iou`): the IoU two *independent random* masks with kept fractions
  ``p`` and ``q`` would have, pq / (p + q − pq). An IoU near it means the two methods agree no
  more than chance; above it, they pick the same weights.

Comparing masks of different models or shapes is a user error (:class:`ToolkitError`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from toolkit.compare.names import run_name, run_names
from toolkit.errors import ToolkitError
from toolkit.store.runs import RunRecord


def _bool(mask: np.ndarray) -> np.ndarray:
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise ToolkitError(f"a keep-mask must be a 2-D (out, in) array, got shape {mask.shape}")
    return mask.astype(bool, copy=False)


def check_same_shape(a: np.ndarray, b: np.ndarray, labels: tuple[str, str] = ("a", "b")) -> None:
    """Raise :class:`ToolkitError` when the two masks are not the same (out, in) shape."""
    if np.shape(a) != np.shape(b):
        raise ToolkitError(
            f"masks have different shapes: {labels[0]} {tuple(np.shape(a))} vs {labels[1]} {tuple(np.shape(b))}; "
            "compare runs of the same model and the same linear"
        )


def iou(a: np.ndarray, b: np.ndarray) -> float:
    """|a ∧ b| / |a ∨ b| of the kept weights; 1.0 when neither keeps anything.

    >>> iou(np.array([[1, 1, 0, 0]]), np.array([[1, 0, 1, 0]]))
    0.3333333333333333
    """
    a, b = _bool(a), _bool(b)
    check_same_shape(a, b)
    union = int(np.count_nonzero(a | b))
    return 1.0 if union == 0 else int(np.count_nonzero(a & b)) / union


def hamming(a: np.ndarray, b: np.ndarray) -> float:
    """Fraction of positions where the masks differ, in [0, 1].

    >>> hamming(np.array([[1, 1, 0, 0]]), np.array([[1, 0, 1, 0]]))
    0.5
    """
    a, b = _bool(a), _bool(b)
    check_same_shape(a, b)
    return int(np.count_nonzero(a != b)) / a.size if a.size else 0.0


def group_agreement(a: np.ndarray, b: np.ndarray, m: int = 4) -> float:
    """Fraction of n:m groups (``m`` consecutive inputs of one row) the two masks choose alike.

    Raises :class:`ToolkitError` when ``m`` < 1 or does not divide the input width.

    >>> group_agreement(np.array([[1, 1, 0, 0, 1, 0, 1, 0]]), np.array([[1, 1, 0, 0, 0, 1, 1, 0]]), m=4)
    0.5
    """
    a, b = _bool(a), _bool(b)
    check_same_shape(a, b)
    rows, cols = a.shape
    if m < 1 or cols % m:
        raise ToolkitError(f"group size m={m} must divide the input width {cols}; pick e.g. 4 or 8")
    same = (a == b).reshape(rows, cols // m, m).all(axis=2)  # (out, in/m)
    return float(same.mean()) if same.size else 1.0


def chance_iou(kept_a: float, kept_b: float) -> float:
    """IoU of two independent uniformly random masks that keep fractions ``kept_a`` and ``kept_b``.

    Each weight is in both with probability pq and in either with probability p + q − pq, so
    E|a ∧ b| / E|a ∨ b| = pq / (p + q − pq); for masks of thousands of weights the IoU of one draw
    is within a fraction of a percent of it. 1.0 when both keep nothing (as :func:`iou`).

    >>> chance_iou(0.5, 0.5)
    0.3333333333333333
    """
    p, q = float(kept_a), float(kept_b)
    union = p + q - p * q
    return 1.0 if union <= 0 else p * q / union


def sparsity(mask: np.ndarray) -> float:
    """Fraction of weights pruned (False) in ``mask``."""
    mask = _bool(mask)
    return 1.0 - int(np.count_nonzero(mask)) / mask.size if mask.size else 0.0


def row_sparsity(mask: np.ndarray) -> np.ndarray:
    """Per output row: the fraction pruned, shape (out,)."""
    return 1.0 - _bool(mask).mean(axis=1)


def column_sparsity(mask: np.ndarray) -> np.ndarray:
    """Per input column: the fraction pruned, shape (in,)."""
    return 1.0 - _bool(mask).mean(axis=0)


def overlap(a: np.ndarray, b: np.ndarray, m: int = 4) -> dict[str, float]:
    """IoU, its chance baseline, Hamming distance, n:m group agreement (nan when ``m`` does not divide the width)."""
    a, b = _bool(a), _bool(b)
    check_same_shape(a, b)
    try:
        groups = group_agreement(a, b, m)
    except ToolkitError:
        groups = float("nan")
    sparsity_a, sparsity_b = sparsity(a), sparsity(b)
    return {"iou": iou(a, b), "chance_iou": chance_iou(1 - sparsity_a, 1 - sparsity_b), "hamming": hamming(a, b),
            "group_agreement": groups, "sparsity_a": sparsity_a, "sparsity_b": sparsity_b}


# -- runs -------------------------------------------------------------------------------------
def run_label(record: RunRecord) -> str:
    """``FISTAPruner 50% · OWL · DSnoT`` (:func:`toolkit.compare.names.run_name`; short enough for a legend)."""
    return run_name(record)


def check_comparable(records: Sequence[RunRecord]) -> None:
    """Raise :class:`ToolkitError` unless there are ≥ 2 runs, all of one model, all with masks."""
    if len(records) < 2:
        raise ToolkitError("pick two or more finished runs to compare")
    models = {}
    for record in records:
        config = record.config if isinstance(record.config, dict) else {}
        models.setdefault(str(config.get("model", "?")), []).append(record.run_id)
        if record.status == "damaged":
            raise ToolkitError(f"run {record.run_id} is damaged ({record.error}); pick another run")
        if not record.mask_names():
            raise ToolkitError(f"run {record.run_id} has no stored masks (status {record.status}); pick another run")
    if len(models) > 1:
        listing = "; ".join(f"{model}: {', '.join(ids)}" for model, ids in models.items())
        raise ToolkitError(f"the runs are of different models ({listing}); pick runs of one model")


def load_masks(records: Sequence[RunRecord], layer: int, name: str) -> dict[str, np.ndarray]:
    """``{label: keep_mask}`` of linear (``layer``, ``name``) in every run, shapes checked alike."""
    check_comparable(records)
    return _load(records, layer, name)


def _load(records: Sequence[RunRecord], layer: int, name: str) -> dict[str, np.ndarray]:
    masks: dict[str, np.ndarray] = {}
    for label, record in zip(run_names(records), records, strict=True):  # equal configs told apart by seed or time
        masks[label] = record.load_mask(layer, name)
    labels = list(masks)
    for label in labels[1:]:
        check_same_shape(masks[labels[0]], masks[label], (labels[0], label))
    return masks


def pairwise(masks: dict[str, np.ndarray], m: int = 4) -> list[dict[str, Any]]:
    """Overlap of every run against the first one: ``[{"pair", "iou", "hamming", ...}, ...]``."""
    labels = list(masks)
    return [{"pair": f"{labels[0]} vs {label}", **overlap(masks[labels[0]], masks[label], m)} for label in labels[1:]]


def all_linears(records: Sequence[RunRecord], m: int = 4) -> list[dict[str, Any]]:
    """Overlap of every run against the first for every linear they all stored, in layer order."""
    check_comparable(records)
    common = set(records[0].mask_names())
    for record in records[1:]:
        common &= set(record.mask_names())
    if not common:
        raise ToolkitError("the runs share no stored linear; pick runs of the same model")
    rows = []
    for layer, name in sorted(common):
        masks = _load(records, layer, name)
        rows.extend({"layer": layer, "name": name, **row} for row in pairwise(masks, m))
    return rows
