"""Any number of finished runs of one model as plain data for overlays (no torch).

Per run: its name (:func:`toolkit.compare.names.run_names`), the configuration it shares with runs
that differ only in calibration seed (``group``), the same without the target (``series``: one
curve over sparsity), its target's label and seed, the layer output error per decoder
layer (``LayerDone.output_rel_error``, ‖Y* − Y‖/‖Y‖ of the pruned layer against the dense one on
calibration inputs; ``layer_error_measured`` is False for a run made with ``--error none`` or by a data-free
method), the
fraction of weights zeroed per layer (from the runs' ``SublayerPruned`` events, weighted by each
linear's size), the achieved sparsity, perplexity (dense and pruned) and the mean zero-shot accuracy
(dense and pruned) when tasks were scored.

Runs of different models are refused (:class:`ToolkitError`, one line naming them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from toolkit.compare.names import config_name, run_name, run_names
from toolkit.errors import ToolkitError
from toolkit.events import LayerDone, SublayerPruned
from toolkit.store.runs import RunRecord


def check_one_model(records: Sequence[RunRecord]) -> None:
    """Raise :class:`ToolkitError` unless there are runs, all finished compressions of one model."""
    if not records:
        raise ToolkitError("pick one or more finished runs of one model to overlay")
    models: dict[str, list[str]] = {}
    for record in records:
        config = record.config if isinstance(record.config, dict) else {}
        models.setdefault(str(config.get("model", "?")), []).append(run_name(record))
        if record.status == "damaged":
            raise ToolkitError(f"run {record.run_id} is damaged ({record.error}); pick another run")
        if not isinstance(record.result, dict):
            raise ToolkitError(f"run {record.run_id} has no result (status {record.status}); pick a finished run")
    if len(models) > 1:
        listing = "; ".join(f"{model}: {', '.join(names)}" for model, names in models.items())
        raise ToolkitError(f"the runs are of different models ({listing}); pick runs of one model")


def overlay_runs(records: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """One plain dict per run (see the module doc), in the order given; refuses mixed models."""
    check_one_model(records)
    runs = []
    for name, record in zip(run_names(records), records, strict=True):
        config = record.config if isinstance(record.config, dict) else {}
        result = record.result if isinstance(record.result, dict) else {}
        errors, sparsity = per_layer(record)
        data = str(config.get("eval_data") or "")
        ppl, dense = result.get("ppl") or {}, result.get("dense_ppl") or {}
        mean = ((result.get("zero_shot") or {}).get("mean") or {}) if isinstance(result.get("zero_shot"), dict) else {}
        runs.append({"name": name, "group": run_name(record), "series": config_name(config, ""),
                     "target": record.label, "seed": config.get("seed"), "run_id": record.run_id,
                     "method": str(config.get("method", "?")), "layer_error": errors, "layer_sparsity": sparsity,
                     "layer_error_measured": (result.get("layer_error") or {}).get(
                         "measured", config.get("error", "sample") != "none"),
                     "achieved_sparsity": _num(result.get("achieved_sparsity")),
                     "ppl": _num(ppl.get(data)), "dense_ppl": _num(dense.get(data)),
                     "accuracy": _num(mean.get("pruned")), "dense_accuracy": _num(mean.get("dense"))})
    return runs


def per_layer(record: RunRecord) -> tuple[list[float], list[float]]:
    """(layer output error, fraction zeroed) per decoder layer, index = layer; nan where not recorded."""
    errors: dict[int, float] = {}
    zeros: dict[int, list[float]] = {}  # layer → [zeroed weights, weights]
    for event in record.iter_events():
        if isinstance(event, LayerDone):
            errors[event.layer] = _num(event.output_rel_error)
        elif isinstance(event, SublayerPruned) and math.isfinite(_num(event.sparsity)):
            size = math.prod(int(n) for n in event.shape) if event.shape else 1
            counts = zeros.setdefault(event.layer, [0.0, 0.0])
            counts[0] += float(event.sparsity) * size
            counts[1] += size
    layers = max([*errors, *zeros], default=-1) + 1
    return ([errors.get(i, math.nan) for i in range(layers)],
            [zeros[i][0] / zeros[i][1] if i in zeros and zeros[i][1] else math.nan for i in range(layers)])


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
