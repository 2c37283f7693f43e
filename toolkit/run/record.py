"""The result dict of a run (result.json, the CLI's ``--json``): what was asked, what happened, provenance."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from toolkit.engine.phases import phase_totals
from toolkit.engine.state import EngineResult
from toolkit.run.accounting import Accounting
from toolkit.run.config import RunConfig
from toolkit.run.provenance import peak_rss_mb, versions
from toolkit.runtime.placement import storage_dtype
from toolkit.runtime.precision import DTYPE_NAMES
from toolkit.store.runs import SCHEMA

LAYER_FIELDS = ("layer", "name", "shape", "sparsity", "rel_error", "rel_error_dense", "seconds", "bits",
                "quant_rel_error", "params_before", "params_after")


def result_record(config: RunConfig, run: Any, result: EngineResult, accounting: Accounting, ppl: dict,
                  dense_ppl: dict) -> dict[str, Any]:
    """The result dict (result.json, the CLI's --json): what was asked, what happened, provenance.

    ``run`` is the pipeline's ``Prepared`` (its spec, method config, engine config, device, model, protocol).
    """
    engine = dataclasses.asdict(run.engine_cfg)
    engine.update(propagate=config.propagate or run.spec.propagate,
                  sequential=config.sequential or run.spec.sequential)
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
        "versions": versions(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
