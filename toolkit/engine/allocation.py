"""The plan phase of a linear-scope run: every decoder layer's sparsity ratio (toolkit/spec/allocation.py).

``uniform`` needs nothing. A ratio file is checked against the model's layers. OWL scores the
dense model: layer 0's captured inputs go through every decoder layer in turn, unpruned, while
hooks sum ‖X_j‖² per input column of every linear; layer l's outlier ratio is

    LOD_l = (1/N_l) Σ_ij 𝟙[A_ij > M · Ā_l],   A_ij = |W_ij| · ‖X_j‖₂ / √N,

over all N_l weights of the layer's linears (Ā_l their mean score; the 1/√N scale cancels). The
ratios follow from :func:`toolkit.spec.allocation.owl_ratios`; the pass costs one dense forward of
the calibration windows through the model, charged to the ``plan`` phase.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor, nn

from toolkit.engine.capture import LayerInputs, run_layer
from toolkit.engine.linear import on_device
from toolkit.engine.state import RunState
from toolkit.engine.stats import capture_inputs
from toolkit.errors import ToolkitError
from toolkit.events import AllocationPlanned
from toolkit.models.layers import get_weight, layer_linears
from toolkit.runtime.precision import forward_precision, full_precision
from toolkit.spec.allocation import FILE, OWL, check_ratios, owl_ratios, weighted_mean
from toolkit.spec.targets import Unstructured


def layer_sizes(layers: nn.ModuleList) -> list[int]:
    """The weight count of every decoder layer's linears (what allocation spreads the sparsity over)."""
    return [sum(get_weight(m).numel() for m in layer_linears(layer).values()) for layer in layers]


def check_allocation_target(run: RunState) -> float:
    """The run's unstructured target as a fraction; one line when the allocation cannot spread it."""
    target = run.compression.sparsity
    if not isinstance(target, Unstructured):
        what = "a quantize-only run has no sparsity" if target is None else \
            f"{target} fixes the sparsity of every group of weights"
        raise ToolkitError(f"--allocation {run.cfg.allocation.label} spreads an unstructured sparsity over the "
                           f"layers; {what}: give --sparsity P% or drop --allocation")
    return target.sparsity


def plan_allocation(run: RunState, layers: nn.ModuleList, inputs: LayerInputs) -> None:
    """Set ``run.layer_sparsity`` and ``run.result.allocation`` from the run's allocation; emit AllocationPlanned.

    ``inputs`` are layer 0's captured inputs (not consumed: the pruning starts from them again).
    """
    allocation = run.cfg.allocation
    if allocation.uniform:
        return
    start = time.perf_counter()
    target = check_allocation_target(run)
    sizes = layer_sizes(layers)
    lods: list[float] = []
    with run.timer.section("plan"):
        if allocation.kind == FILE:
            check_ratios(allocation.ratios, sizes, target, f"allocation file {allocation.path!r}")
            ratios = list(allocation.ratios)
        else:
            assert allocation.kind == OWL, f"unknown allocation kind {allocation.kind!r}"
            lods = outlier_ratios(run, layers, inputs, allocation.outlier_threshold)
            ratios = owl_ratios(lods, sizes, target, allocation.lam)
    run.layer_sparsity = tuple(ratios)
    total = weighted_mean(ratios, sizes)
    run.result.allocation = {**allocation.to_dict(), "ratios": ratios, "outlier_ratios": lods,
                             "layer_weights": sizes, "total": total}
    run.emit(AllocationPlanned(allocation=allocation.label, ratios=ratios, outlier_ratios=lods, total=total,
                               seconds=time.perf_counter() - start))


def outlier_ratios(run: RunState, layers: nn.ModuleList, inputs: LayerInputs, threshold: float) -> list[float]:
    """LOD_l of every decoder layer on the dense model's calibration inputs (module docstring)."""
    ratios = []
    with torch.no_grad():
        for index, layer in enumerate(layers):
            run.check_cancel()
            with on_device(run, layer):
                sums, outputs = _column_sums(run, layer, inputs)
                ratios.append(_layer_outlier_ratio(layer_linears(layer), sums, threshold))
            inputs = inputs.next_layer(outputs)
            assert inputs.layer == index + 1
    return ratios


def _column_sums(run: RunState, layer: nn.Module, inputs: LayerInputs) -> tuple[dict[str, Tensor], list[Tensor]]:
    """Σ_t x_tj² per input column of every linear of ``layer`` (float32), and the layer's dense outputs."""
    linears = layer_linears(layer)
    sums = {name: torch.zeros(get_weight(m).shape[1], device=run.device) for name, m in linears.items()}

    def add(name: str, x: Tensor) -> None:
        with full_precision(run.device):
            sums[name] += x.reshape(-1, x.shape[-1]).float().square().sum(dim=0)

    with capture_inputs(linears, add), forward_precision(run.device, run.forward_dtype):
        outputs = [run_layer(layer, inputs, b) for b in range(len(inputs.hidden))]
    return sums, outputs


def _layer_outlier_ratio(linears: dict[str, nn.Module], sums: dict[str, Tensor], threshold: float) -> float:
    """(1/N_l) Σ 𝟙[A_ij > M·Ā_l] over the layer's linears, A = |W| ⊙ ‖X_j‖: the mean, then the count.

    Scores are built one linear at a time (twice), never for the whole layer at once.
    """
    def scores(name: str) -> Tensor:
        return get_weight(linears[name]).float().abs() * sums[name].sqrt().unsqueeze(0)

    with full_precision(next(iter(sums.values())).device):
        total = sum(float(scores(name).sum()) for name in linears)
        count = sum(get_weight(m).numel() for m in linears.values())
        mean = total / count
        outliers = sum(int((scores(name) > threshold * mean).sum()) for name in linears)
    return outliers / count
