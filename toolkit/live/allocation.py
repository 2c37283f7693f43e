"""A run's layer-wise allocation and mask refinement as plain state (torch-free, like :mod:`toolkit.live.view`).

A linear-scope run spreads its sparsity S over the decoder layers (docs/allocation.md): with
``--allocation owl`` or a ratio file the engine emits one ``AllocationPlanned`` (every layer's ratio
s_l, OWL's outlier ratios LOD_l, the weighted total) before layer 0 is pruned; a uniform run emits
none, and its first ``LayerStarted`` says every layer gets S. With ``--refine dsnot`` every refined
linear emits a ``MaskRefined`` (swaps, DSnoT's objective and the measured error before and after).

:class:`AllocationView` folds those events (live, or replayed from ``events.jsonl``);
:func:`allocation_from_result` builds the same view from a finished run's ``result.json``, which
also holds each layer's weight count (``layer_weights``: what the total is weighted by).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkit.errors import ToolkitError
from toolkit.events import AllocationPlanned, Event, LayerStarted, MaskRefined, RunStarted
from toolkit.spec.compression import parse_compression

UNIFORM = "uniform"
SPREADABLE = ("unstructured", "nm")  # sparsity kinds with a per-layer ratio (n:m: the same n/m everywhere)


@dataclass
class AllocationView:
    """Per-layer sparsity of one run and its refinement, as plain data.

    ``kind`` is the compression's sparsity kind (``unstructured`` | ``nm`` | ``structured``; "" for a
    quantize-only run) and ``target`` its fraction S. ``planned`` turns True once the ratios are
    known: at ``AllocationPlanned``, or at the first ``LayerStarted`` without one (uniform).
    ``ratios`` is empty for a uniform run (every layer at ``target``; see :meth:`layer_ratios`).
    ``layer_weights`` (weights of each decoder layer's linears) comes from result.json only.
    """

    label: str = ""  # uniform | owl:5,0.08 | the ratio file's path ("" until planned)
    kind: str = ""
    target: float = math.nan
    compression: str = ""  # the compression's label (70%, 2:4)
    num_layers: int = 0
    planned: bool = False
    ratios: list[float] = field(default_factory=list)
    outlier_ratios: list[float] = field(default_factory=list)
    total: float = math.nan
    layer_weights: list[int] = field(default_factory=list)
    refined: list[MaskRefined] = field(default_factory=list)

    @property
    def applies(self) -> bool:
        """Whether the run has a per-layer sparsity to draw (unstructured or n:m)."""
        return self.kind in SPREADABLE and math.isfinite(self.target)

    @property
    def uniform(self) -> bool:
        """True when every layer gets the run's target (no AllocationPlanned)."""
        return not self.ratios

    def layer_ratios(self) -> list[float]:
        """s_l for every layer: the planned ratios, or ``target`` repeated for a uniform run ([] until planned)."""
        if not self.planned:
            return []
        return list(self.ratios) if self.ratios else [self.target] * self.num_layers

    def apply(self, event: Event) -> set[str]:
        """Fold one event; returns the sections it changed ("allocation", "refine")."""
        if isinstance(event, RunStarted):
            fresh = AllocationView(num_layers=int(event.num_layers), compression=event.sparsity,
                                   **_target(event.compression, event.sparsity))
            self.__dict__.update(fresh.__dict__)
            return {"allocation", "refine"}
        if isinstance(event, AllocationPlanned):
            self.label, self.planned = event.allocation, True
            self.ratios = [_num(r) for r in event.ratios]
            self.outlier_ratios = [_num(r) for r in event.outlier_ratios]
            self.total = _num(event.total)
            self.num_layers = max(self.num_layers, len(self.ratios))
            return {"allocation"}
        if isinstance(event, LayerStarted) and not self.planned:
            self.label, self.planned, self.total = UNIFORM, True, self.target
            self.num_layers = max(self.num_layers, int(event.num_layers))
            return {"allocation"}
        if isinstance(event, MaskRefined):
            self.refined.append(event)
            return {"refine"}
        return set()


def _target(compression: Mapping[str, Any] | None, label: str = "") -> dict[str, Any]:
    """``kind`` and ``target`` of a compression dict (RunStarted, result.json), else of its ``label`` (schema 1)."""
    sparsity = (compression or {}).get("sparsity")
    if not compression:
        try:
            sparsity = parse_compression(label or None).to_dict()["sparsity"]
        except ToolkitError:  # a label this version cannot read: nothing to draw
            return {}
    if not isinstance(sparsity, Mapping):
        return {}
    return {"kind": str(sparsity.get("kind", "")), "target": _num(sparsity.get("fraction"))}


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def weights_per_layer(records: list[Any]) -> list[int]:
    """Weights of each decoder layer's linears from result.json ``layers`` (``params_before``, else the shape)."""
    sizes: dict[int, int] = {}
    for record in records:
        if not isinstance(record, Mapping) or not isinstance(record.get("layer"), int):
            continue
        count = record.get("params_before")
        if not isinstance(count, int):
            shape = record.get("shape") or []
            count = math.prod(int(n) for n in shape) if shape else 0
        sizes[record["layer"]] = sizes.get(record["layer"], 0) + count
    return [sizes.get(layer, 0) for layer in range(max(sizes) + 1)] if sizes else []


def allocation_from_result(result: Mapping[str, Any]) -> AllocationView:
    """The :class:`AllocationView` of a finished run's result dict (result.json); nothing is read from disk.

    Runs recorded before allocation existed are uniform. ``refined`` stays empty: the per-linear
    refinement lives in the run's events (replay them with :class:`AllocationView.apply`).
    """
    entry = result.get("allocation")
    entry = entry if isinstance(entry, Mapping) else {}
    label = str((result.get("compression") or {}).get("label") or result.get("sparsity") or "")
    view = AllocationView(compression=label, **_target(result.get("compression"), label))
    records = result.get("layers")
    records = records if isinstance(records, list) else []
    view.layer_weights = [int(n) for n in entry.get("layer_weights") or weights_per_layer(records)]
    view.ratios = [_num(r) for r in entry.get("ratios") or []]
    view.outlier_ratios = [_num(r) for r in entry.get("outlier_ratios") or []]
    view.label = str(entry.get("label") or UNIFORM)
    view.num_layers = max(len(view.ratios), len(view.layer_weights))
    view.total = _num(entry.get("total")) if "total" in entry else view.target
    view.planned = True
    return view
