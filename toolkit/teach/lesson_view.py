"""What the Lesson shows, read from its stored runs (no torch): errors, one linear's masks, perplexity, texts.

:func:`lesson_material` gathers, per method, the per-linear errors (SublayerPruned), the layer
output errors (LayerDone), FISTAPruner's λ rounds (LambdaStep), the keep-masks of one linear that
every run pruned, the perplexities and the first generated sentence; :func:`walkthrough` phrases
what differs, every number computed from the runs (:mod:`toolkit.teach.insights`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolkit.compare.masks import iou
from toolkit.compare.masks import sparsity as mask_sparsity
from toolkit.events import LambdaStep, LayerDone, RunStarted, SublayerPruned
from toolkit.live.view import RunView
from toolkit.store.runs import RunRecord
from toolkit.teach.insights import describe_lambda, describe_layer_jumps, lambda_summary

LABELS = {"magnitude": "magnitude", "wanda": "Wanda", "sparsegpt": "SparseGPT", "fista": "FISTAPruner"}


@dataclass
class MethodMaterial:
    """One method's run, as the lesson uses it."""

    method: str
    run_id: str
    num_layers: int = 0
    linears: list[str] = field(default_factory=list)
    pruned: list[SublayerPruned] = field(default_factory=list)
    layers: list[LayerDone] = field(default_factory=list)
    lambdas: list[LambdaStep] = field(default_factory=list)
    ppl: float = math.nan
    dense_ppl: float = math.nan
    prompt: str = ""
    dense_text: str = ""
    text: str | None = None  # None: the stored run was made without generations

    @property
    def label(self) -> str:
        """The method's name as the papers write it."""
        return LABELS.get(self.method, self.method)


@dataclass
class LessonMaterial:
    """Every method's material, and the keep-masks of one linear (layer, name) that all of them pruned."""

    methods: list[MethodMaterial]
    layer: int = -1
    linear: str = ""
    masks: dict[str, np.ndarray] = field(default_factory=dict)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else math.nan


def method_material(record: RunRecord) -> MethodMaterial:
    """Read one finished run: its events (errors, λ rounds), perplexities and first generation."""
    config, result = record.config, record.result or {}
    material = MethodMaterial(method=str(config.get("method")), run_id=record.run_id)
    for event in record.iter_events():
        if isinstance(event, RunStarted):
            material.num_layers, material.linears = event.num_layers, list(event.linears)
        elif isinstance(event, SublayerPruned):
            material.pruned.append(event)
        elif isinstance(event, LayerDone):
            material.layers.append(event)
        elif isinstance(event, LambdaStep):
            material.lambdas.append(event)
    data = config.get("eval_data") or ""
    material.ppl = _number((result.get("ppl") or {}).get(data))
    material.dense_ppl = _number((result.get("dense_ppl") or {}).get(data))
    records = (result.get("generations") or {}).get("records") or []
    if records and isinstance(records[0], dict):
        first = records[0]
        material.prompt, material.dense_text = str(first.get("prompt", "")), str(first.get("dense", ""))
        material.text = str(first["pruned"]) if "pruned" in first else None
    return material


def pick_linear(records: Mapping[str, RunRecord]) -> tuple[int, str]:
    """The linear whose masks the lesson compares: the middle layer's ``down_proj`` when every run has it.

    Otherwise the middle one of the masks every run stored; (-1, "") when they share none.
    """
    shared = set.intersection(*(set(r.mask_names()) for r in records.values())) if records else set()
    if not shared:
        return -1, ""
    ordered = sorted(shared)
    middle = ordered[len(ordered) // 2][0]
    preferred = [key for key in ordered if key[0] == middle and key[1].endswith("down_proj")]
    return (preferred or [ordered[len(ordered) // 2]])[0]


def lesson_material(records: Mapping[str, RunRecord]) -> LessonMaterial:
    """The material of every method (``records``: method → its finished run), in the order given."""
    methods = [method_material(record) for record in records.values()]
    layer, linear = pick_linear(records)
    masks = {LABELS.get(m, m): r.load_mask(layer, linear) for m, r in records.items()} if linear else {}
    return LessonMaterial(methods=methods, layer=layer, linear=linear, masks=masks)


def chance_iou(sparsity: float) -> float:
    """IoU of two independent random masks keeping a fraction k = 1 − sparsity: k² / (2k − k²) = k / (2 − k)."""
    kept = 1.0 - sparsity
    return kept / (2.0 - kept) if kept > 0 else math.nan


def walkthrough(material: LessonMaterial) -> str:
    """Markdown of what differs between the methods, every figure computed from the runs."""
    parts = []
    ranked = sorted((m for m in material.methods if math.isfinite(m.ppl)), key=lambda m: m.ppl)
    dense = next((m.dense_ppl for m in material.methods if math.isfinite(m.dense_ppl)), math.nan)
    if ranked:
        order = " < ".join(f"{m.label} {m.ppl:.1f}" for m in ranked)
        dense_text = f" (dense {dense:.1f})" if math.isfinite(dense) else ""
        parts.append(f"**Perplexity**, lower is better: {order}{dense_text}. Magnitude looks only at |W|; Wanda "
                     "weighs it by the input norms; SparseGPT and FISTAPruner also change the weights they keep "
                     "to make up for the ones removed.")
    means = {m.label: float(np.mean([e.rel_error for e in m.pruned])) for m in material.methods if m.pruned}
    if means:
        listed = ", ".join(f"{label} {value:.3f}" for label, value in sorted(means.items(), key=lambda kv: kv[1]))
        parts.append(f"**Mean relative error per linear** (the heat-maps): {listed}.")
    jumps = describe_layer_jumps({m.label: [e.output_rel_error for e in m.layers] for m in material.methods})
    if jumps:
        parts.append(f"**Layer output error**: {jumps}")
    lam = describe_lambda(lambda_summary(next((m.lambdas for m in material.methods if m.lambdas), [])))
    if lam:
        parts.append(f"**FISTAPruner's λ bisection**: {lam}")
    if len(material.masks) >= 2:
        labels = list(material.masks)
        first = material.masks[labels[0]]
        pairs = ", ".join(f"{labels[0]}–{b} {iou(first, material.masks[b]):.2f}" for b in labels[1:])
        chance = chance_iou(mask_sparsity(first))
        parts.append(f"**Masks of layer {material.layer} {material.linear}**: IoU of kept weights {pairs}; two "
                     f"random masks of this sparsity would give {chance:.2f}.")
    return "\n\n".join(parts)


def live_material(view: RunView, method: str) -> MethodMaterial:
    """One method's material from its live :class:`~toolkit.live.view.RunView` (the run under way, or just ended).

    The heat-map, layer-error and perplexity figures draw it as the layers finish; the masks and
    the walkthrough come from the stored run once it has ended (:func:`lesson_material`).
    """
    material = MethodMaterial(method=method, run_id=view.run_id, num_layers=view.num_layers,
                              linears=list(view.linears), pruned=list(view.pruned), layers=list(view.layers_done))
    data = str(view.protocol.get("evaluation", {}).get("dataset", "")) if view.protocol.get("evaluation") else ""
    material.ppl = _number(view.ppl.get(data, math.nan)) if data else math.nan
    material.dense_ppl = _number(view.dense_ppl.get(data, math.nan)) if data else math.nan
    dense, pruned = view.evals.texts.get("dense", []), view.evals.texts.get("pruned", [])
    if dense:
        material.prompt, material.dense_text = dense[0].prompt, dense[0].text
        material.text = pruned[0].text if pruned else None
    return material
