"""The result dict of a run (result.json, the CLI's ``--json``): what was asked, what happened, provenance."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from toolkit.engine.phases import phase_totals
from toolkit.engine.state import EngineResult
from toolkit.methods.quant_grid import QuantState
from toolkit.run.accounting import Accounting
from toolkit.run.config import RunConfig
from toolkit.run.provenance import peak_rss_mb, versions
from toolkit.runtime.placement import storage_dtype
from toolkit.runtime.precision import DTYPE_NAMES
from toolkit.store.runs import SCHEMA, StoredQuant

NO_CALIBRATION = "no calibration"  # the layer error's mode in a data-free run (toolkit/engine/data_free.py)
LAYER_FIELDS = ("layer", "name", "shape", "sparsity", "rel_error", "rel_error_dense", "seconds", "bits",
                "quant_rel_error", "params_before", "params_after", "weight_rel_error")


def result_record(config: RunConfig, run: Any, result: EngineResult, accounting: Accounting, ppl: dict,
                  dense_ppl: dict) -> dict[str, Any]:
    """The result dict (result.json, the CLI's --json): what was asked, what happened, provenance.

    ``run`` is the pipeline's ``Prepared`` (its spec, method config, engine config, device, model, protocol).
    ``engine.forward_dtype`` is the precision the layer passes ran in (``fp32`` | ``bf16``), with
    ``engine.forward_dtype_asked`` the option when it differs (``auto``, or ``bf16`` on a device without it).
    """
    engine = dataclasses.asdict(run.engine_cfg)
    engine.update(propagate=config.propagate or run.spec.propagate,
                  sequential=config.sequential or run.spec.sequential)
    ran = result.precision.get("forward")  # fp32 | bf16 as the passes ran (empty: a block-scope run)
    if ran and ran != engine["forward_dtype"]:  # auto resolved, or bf16 asked where the device has none (a warning)
        engine.update(forward_dtype=ran, forward_dtype_asked=engine["forward_dtype"])
    return {
        "schema": SCHEMA,
        "model": config.model,
        "method": run.spec.name,
        "options": dataclasses.asdict(run.method_cfg),
        "sparsity": None if config.sparsity is None else str(config.sparsity),
        "quant": None if config.quant is None else config.quant.label,
        "unit": None if config.unit is None else config.unit.value,
        "compression": config.compression.to_dict(),
        "achieved_sparsity": accounting.sparsity,
        "accounting": accounting.to_dict(),
        "ppl": ppl,
        "dense_ppl": dense_ppl,
        "prune_seconds": result.seconds,
        "phases": phase_totals(result.phases),
        "phase_layers": result.phases,
        "precision": result.precision | {"saved": DTYPE_NAMES.get(storage_dtype(run.loaded.model), "")},
        "peak_rss_mb": peak_rss_mb(),
        "device": str(run.device),
        "protocol": run.protocol,
        "engine": engine,
        "layers": [{key: record.get(key) for key in LAYER_FIELDS} for record in result.layers],
        "allocation": result.allocation or {"kind": "uniform", "label": "uniform"},
        "refine": refine_summary(run.engine_cfg.refine, result.layers),
        "layer_error": layer_error_record(run.engine_cfg.error if run.protocol["calibration"].get("used", True)
                                          else NO_CALIBRATION, result),
        "versions": versions(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def layer_error_record(mode: str, result: EngineResult) -> dict[str, Any]:
    """The layer output error's protocol and values (result.json ``layer_error``).

    ``mode`` (``sample`` | ``none`` | ``no calibration``: a data-free run computed no input), ``measured``,
    ``windows`` (the most calibration windows one layer's error covered) and ``per_layer`` (LayerDone's, in
    layer order). Not measured (``--error none``, ``no calibration``):
    ``windows`` and ``per_layer`` are null, never 0 or NaN. Block-scope runs report their errors in the
    events only (``windows`` and ``per_layer`` null there).
    """
    measured = mode not in ("none", NO_CALIBRATION)
    values = [result.layer_errors[i] for i in sorted(result.layer_errors)] if measured else []
    return {"mode": mode, "measured": measured, "windows": result.error_windows if measured else None,
            "per_layer": values or None}


def refine_summary(refine: Any, layers: list[dict[str, Any]]) -> dict[str, Any] | None:
    """DSnoT's effect over the run: swaps, and the mean ‖ΔW X*‖/‖W X*‖ of the methods' masks and the refined ones."""
    if refine is None:
        return None
    refined = [r for r in layers if "rel_error_before_refine" in r.get("info", {})]
    before = [float(r["info"]["rel_error_before_refine"]) for r in refined]
    after = [float(r["rel_error"]) for r in refined]
    return {**refine.to_dict(), "swaps": sum(int(r.get("info", {}).get("dsnot_swaps", 0)) for r in layers),
            "rel_error_before_mean": sum(before) / len(before) if before else None,
            "rel_error_after_mean": sum(after) / len(after) if after else None}


def stored_quant(state: QuantState) -> StoredQuant:
    """A quantization state as the run store keeps it (numpy, on the CPU)."""
    return StoredQuant(codes=state.codes.cpu().numpy(), scales=state.scales.float().cpu().numpy(),
                       zeros=state.zeros.float().cpu().numpy(), bits=state.spec.bits,
                       group_size=state.spec.group_size, symmetric=state.spec.symmetric)
