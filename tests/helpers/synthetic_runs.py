"""Synthetic events and run-store folders for the dashboard tests (no torch, no pruning)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from toolkit.events import (
    BlockStep,
    EvalPoint,
    Event,
    LambdaStep,
    LayerDone,
    LayerStarted,
    RunFinished,
    RunStarted,
    RunWarning,
    SolverStep,
    SublayerPruned,
)
from toolkit.store.runs import RunWriter

LINEARS = ["self_attn.q_proj", "mlp.down_proj"]
SHAPES = {"self_attn.q_proj": (8, 16), "mlp.down_proj": (16, 8)}


def run_events(run_id: str = "r1", layers: int = 2, *, method: str = "fista", finished: bool = True) -> list[Event]:
    """A complete run of ``layers`` layers × two linears with solver, λ and block traces."""
    events: list[Event] = [
        RunStarted(run_id=run_id, model="tiny-llama", method=method, sparsity="50%", options={"xi": 0.3},
                   protocol={"model_label": "tiny random llama", "calibration": {"source": "wiki", "nsamples": 4,
                             "seqlen": 64, "seed": 0}, "evaluation": {"dataset": "wiki", "seqlen": 64, "windows": 4}},
                   num_layers=layers, linears=list(LINEARS), device="cpu"),
        EvalPoint(dataset="wiki", which="dense", ppl=20.0, seq_len=64, windows=4, tokens=256),
    ]
    for layer in range(layers):
        events.append(LayerStarted(layer=layer, num_layers=layers, groups=[[n] for n in LINEARS]))
        for index, name in enumerate(LINEARS):
            for r in range(2):
                events += [SolverStep(layer=layer, name=name, solver="fista", step=3 * r + k, objective=10.0 / (1 + k),
                                      values={"lam": 1e-3 * (r + 1), "round": float(r)}) for k in range(3)]
                events.append(LambdaStep(layer=layer, name=name, round=r, lam=1e-3 * (r + 1), lam_low=0.0,
                                         lam_high=1.0, e_total=2.0, e_round=0.5 + r, ratio=0.25 + 0.5 * r, xi=0.3,
                                         sparsity_before_rounding=0.4 + 0.05 * r, improved=r == 0))
            events.append(BlockStep(layer=layer, name=name, block=0, removed=64, error=0.5, seconds=0.01))
            events.append(SublayerPruned(layer=layer, name=name, shape=list(SHAPES[name]), sparsity=0.5,
                                         rel_error=0.1 * (layer + 1) + 0.01 * index, rel_error_dense=float("nan"),
                                         damping=0.01, seconds=0.1, info={"outlier_rows": [0, 1]}))
        events.append(LayerDone(layer=layer, num_layers=layers, output_rel_error=0.05 * (layer + 1), seconds=0.3))
    events.append(RunWarning(message="damping raised to 0.1", layer=0, name="mlp.down_proj"))
    if finished:
        events += [EvalPoint(dataset="wiki", which="pruned", ppl=25.0, seq_len=64, windows=4, tokens=256),
                   RunFinished(achieved_sparsity=0.5, prune_seconds=1.5, ppl={"wiki": 25.0}, dense_ppl={"wiki": 20.0})]
    return events


def write_run(root: Path, config: dict[str, Any], *, seed: int = 0, shapes: dict[str, tuple[int, int]] | None = None,
              ppl: float = 25.0, layers: int = 2) -> Path:
    """A finished run folder with random 50% keep-masks, events and result.json; returns its path."""
    writer = RunWriter(root, config)
    rng = np.random.default_rng(seed)
    for event in run_events(writer.run_id, layers, method=str(config.get("method", "fista"))):
        writer.event(event)
    for layer in range(layers):
        for name, shape in (shapes or SHAPES).items():
            writer.mask(layer, name, rng.random(shape) < 0.5)
    result = {"achieved_sparsity": 0.5, "ppl": {"wiki": ppl}, "dense_ppl": {"wiki": 20.0}, "prune_seconds": 1.5,
              "run_id": writer.run_id}
    writer.finish(result)
    return writer.path


def hand_edit(path: Path, name: str, text: str) -> None:
    """Overwrite one file of a run folder, as a person with an editor would."""
    (path / name).write_text(text, encoding="utf-8")


def as_json(data: Any) -> str:
    """Indented JSON text."""
    return json.dumps(data, indent=2)
