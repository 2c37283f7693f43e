"""Kept heads and channels of structured runs, compared (numpy, no torch).

A structured run removes whole units, so it stores no keep-masks; what it kept comes from its
``UnitsRemoved`` events (``kept_map`` per layer and kind, :mod:`toolkit.live.structure`). Stacked
over layers, one kind becomes a ``keep_mask`` (layers, units) — True = kept — so the overlap
measures of :mod:`toolkit.compare.masks` (IoU, Hamming) apply unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from toolkit.compare.masks import hamming, iou
from toolkit.compare.names import run_names
from toolkit.errors import ToolkitError
from toolkit.live.structure import KEPT_KINDS, fold_structure
from toolkit.store.runs import RunRecord

Kept = dict[str, dict[int, str]]  # unit kind → layer → kept_map


def is_structured(record: RunRecord) -> bool:
    """True for a run of a block-scope method (it stored ``structure.json``)."""
    return (record.path / "structure.json").is_file()


def load_kept(records: Sequence[RunRecord]) -> dict[str, Kept]:
    """``{run label: kept maps}`` of two or more structured runs of one model, checked alike.

    Raises :class:`ToolkitError` for fewer than two runs, runs of different models, a run that is
    not structured or was recorded before kept maps were, and maps of different widths.
    """
    if len(records) < 2:
        raise ToolkitError("pick two or more finished runs to compare")
    models = {str((r.config if isinstance(r.config, dict) else {}).get("model", "?")) for r in records}
    if len(models) > 1:
        raise ToolkitError(f"the runs are of different models ({', '.join(sorted(models))}); pick runs of one model")
    runs: dict[str, Kept] = {}
    for label, record in zip(run_names(records), records, strict=True):
        if not is_structured(record):
            raise ToolkitError(f"run {record.run_id} keeps weights by masks, not whole heads and channels; "
                               "compare structured runs with structured runs")
        structure = fold_structure(record.iter_events())
        if structure.depth is not None:
            raise ToolkitError(f"run {record.run_id} removed whole decoder layers (depth), not heads or channels: "
                               "its layer scores show in the Runs tab; compare heads and channels of width runs")
        kept = structure.kept
        if not kept:
            raise ToolkitError(f"run {record.run_id} recorded no kept heads or channels (a run from before "
                               "kept maps were stored); run it again to compare it")
        runs[label] = kept
    for kind in KEPT_KINDS:
        widths = {label: kept_mask(kept, kind).shape for label, kept in runs.items() if kept.get(kind)}
        if len(set(widths.values())) > 1:
            raise ToolkitError(f"the runs' {kind} maps differ in shape ({widths}); compare runs of one model")
    return runs


def kept_mask(kept: Mapping[str, Mapping[int, str]], kind: str) -> np.ndarray:
    """One kind's kept maps stacked as a bool ``keep_mask`` (layers, units); (0, 0) when absent.

    >>> kept_mask({"heads": {0: "101", 1: "011"}}, "heads").astype(int).tolist()
    [[1, 0, 1], [0, 1, 1]]
    """
    maps = kept.get(kind) or {}
    if not maps:
        return np.zeros((0, 0), dtype=bool)
    rows = [np.frombuffer(maps[layer].encode(), dtype=np.uint8) == ord("1") for layer in sorted(maps)]
    if len({len(row) for row in rows}) > 1:
        raise ToolkitError(f"{kind}: layers have different numbers of units; this comparison needs one width")
    return np.stack(rows)


def kept_overlap(runs: Mapping[str, Kept]) -> list[dict[str, Any]]:
    """IoU and Hamming distance of every run's kept units against the first run's, per kind.

    Rows fit :func:`toolkit.figures.masks.overlap_figure` (``group_agreement`` is nan: units have no
    n:m groups).
    """
    labels = list(runs)
    rows = []
    for label in labels[1:]:
        for kind in KEPT_KINDS:
            a, b = kept_mask(runs[labels[0]], kind), kept_mask(runs[label], kind)
            if a.size and b.size:
                rows.append({"pair": f"{kind}: {labels[0]} vs {label}", "iou": iou(a, b), "hamming": hamming(a, b),
                             "group_agreement": float("nan"), "sparsity_a": 1 - float(a.mean()),
                             "sparsity_b": 1 - float(b.mean())})
    return rows
