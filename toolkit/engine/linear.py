"""One decoder layer pruned linear by linear (docs/architecture.md "The flow of one run").

:mod:`toolkit.engine.prune` calls :func:`prune_layer` for each decoder layer i (only layer i on the device):

1. groups of linears that share an input are discovered by one probe forward (call order);
2. statistics of each group are gathered by hooks (:mod:`toolkit.engine.gather`) — ``sequential="layer"``:
   every group in one pass over the unpruned layer; ``sequential="group"``: group g after groups
   < g were pruned (each pass stops as soon as the group's input is captured, or all groups in one
   fused pass). When the method needs the cross-Gram, a dense copy of the layer is run on the same
   inputs to give the dense-path x;
3. the method solves each linear; the engine writes the result back through a
   :class:`~toolkit.engine.writeback.WriteBack` journal and measures it (:mod:`toolkit.engine.solve`);
4. the pruned layer runs on its inputs; ``LayerDone`` carries ‖Y* − Y‖/‖Y‖ against the dense
   layer on the same inputs (None with ``error="none"``: no dense output is kept or run for it);
   layer i+1 sees the pruned (``propagate="pruned"``) or the dense (``"dense"``) outputs.

Every step emits a typed event; every linear is a cancellation point.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from toolkit.engine.capture import LayerInputs, run_layer
from toolkit.engine.fold import fold_layer
from toolkit.engine.gather import fused_pass, gather_stats, sample_batches
from toolkit.engine.solve import prune_group
from toolkit.engine.state import RunState
from toolkit.engine.stats import discover_groups
from toolkit.errors import NumericalError, ToolkitError
from toolkit.events import LayerDone, LayerStarted, RunWarning
from toolkit.models.layers import get_weight, layer_linears
from toolkit.runtime.mapped import release_replaced
from toolkit.runtime.placement import placed
from toolkit.runtime.precision import forward_precision


@contextlib.contextmanager
def on_device(run: RunState, layer: nn.Module) -> Iterator[None]:
    """Hold ``layer`` on ``run.device`` in ``run.layer_dtype`` inside (both moves charged to ``copies``).

    The resident pages of a memory-mapped checkpoint under the tensors moved are released once they are
    copied (:func:`toolkit.runtime.mapped.release_replaced`): the layer is not held twice on the host.
    """
    stack = contextlib.ExitStack()
    with run.timer.section("copies"):
        former = [(t, t.data) for t in [*layer.parameters(), *layer.buffers()]]
        stack.enter_context(placed(layer, run.device, run.layer_dtype))
        release_replaced([data for t, data in former if t.data_ptr() != data.data_ptr()])
        del former
    try:
        yield
    finally:
        with run.timer.section("copies"):
            stack.close()


def dense_next(run: RunState, layer: nn.Module, inputs: LayerInputs) -> LayerInputs:
    """The dense layer's outputs on the main device: the next layer's inputs under propagate=dense."""
    with placed(layer, run.device, run.layer_dtype), forward_precision(run.device, run.forward_dtype):
        return inputs.next_layer([run_layer(layer, inputs, b) for b in range(len(inputs.hidden))])


def use_fused(run: RunState, model: nn.Module, layer: nn.Module, windows: Tensor) -> bool:
    """Whether ``sequential=group`` runs as one pass per layer over all windows at once.

    The fused pass keeps every window's activations of one layer in memory at the same time;
    estimate: tokens × 4 bytes × (6 × widest linear + the widths of the dense-path inputs kept for
    cross statistics), plus the (windows, heads, seq, seq) scores of eager attention.
    """
    if run.cfg.fused == "off" or run.sequential != "group":
        if run.cfg.fused == "on":
            raise ToolkitError("fused=on needs sequential=group (fused is one pass of the group-wise order)")
        return False
    if run.cfg.fused == "on":
        return True
    num, seq = windows.shape
    linears = layer_linears(layer)
    widest = max((max(get_weight(m).shape) for m in linears.values()), default=0)
    per_token = 6 * widest + (sum(get_weight(m).shape[1] for m in linears.values()) if run.needs_cross else 0)
    estimate = num * seq * 4 * per_token
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", "eager") == "eager":
        estimate += num * getattr(config, "num_attention_heads", 1) * seq * seq * 4
    return estimate <= run.cfg.fused_budget_mb * 2**20


def prune_layer(
    run: RunState, index: int, num_layers: int, layer: nn.Module, inputs: LayerInputs,
    groups: list[list[str]] | None,
) -> tuple[list[list[str]], LayerInputs]:
    """Prune decoder layer ``index`` in place; returns its groups and the next layer's inputs.

    The layer's forward passes run at ``run.forward_dtype`` (autocast); statistics and solves in float32.
    """
    with forward_precision(run.device, run.forward_dtype):
        return _prune_layer(run, index, num_layers, layer, inputs, groups)


def _prune_layer(
    run: RunState, index: int, num_layers: int, layer: nn.Module, inputs: LayerInputs,
    groups: list[list[str]] | None,
) -> tuple[list[list[str]], LayerInputs]:
    t0 = time.perf_counter()
    run.layer = index
    assert inputs.layer == index, f"layer {index} was given the inputs of layer {inputs.layer}"
    linears = layer_linears(layer)
    groups = _groups(run, layer, linears, inputs, groups)
    run.layer_module, run.layer_linears = layer, linears
    run.emit(LayerStarted(layer=index, num_layers=num_layers, groups=[list(g) for g in groups]))
    if run.fused:
        pruned, dense = fused_pass(run, layer, linears, inputs, groups)
        if run.fold:
            fold_layer(run, layer, linears, groups)
        layer_done(run, num_layers, _measured_error(run, [pruned], [] if dense is None else [dense]), t0)
        nxt = pruned if run.propagate == "pruned" or dense is None else dense  # dense: always run for propagate=dense
        return groups, inputs.next_layer([nxt])
    dense_copy = copy.deepcopy(layer) if run.needs_cross and run.sequential == "group" else None
    dense_out: list[Tensor] = []
    kept = _dense_batches(run, inputs)
    if run.sequential == "layer":
        all_stats = gather_stats(run, layer, inputs, groups, dense_out=dense_out, keep_batches=kept)
        for group, stats in zip(groups, all_stats, strict=True):
            prune_group(run, linears, group, stats)
    else:
        for g, group in enumerate(groups):
            (stats,) = gather_stats(run, layer, inputs, [group], dense_out=dense_out if g == 0 else None,
                                    dense_layer=dense_copy if g > 0 else None, keep_batches=kept)
            prune_group(run, linears, group, stats)
    if run.fold:  # the shared input scales into what feeds each group, before the layer's output is computed
        fold_layer(run, layer, linears, groups)
    with run.timer.section("propagation"):
        pruned_out = [run_layer(layer, inputs, b) for b in range(len(inputs.hidden))]
    layer_done(run, num_layers, _measured_error(run, pruned_out, dense_out), t0)
    nxt = pruned_out if run.propagate == "pruned" else dense_out
    return groups, inputs.next_layer(nxt)


def _dense_batches(run: RunState, inputs: LayerInputs) -> int:
    """How many batches of the dense statistics pass run to the layer's output and keep it.

    All of them when the dense outputs are the next layer's inputs (``propagate=dense``); none
    when the output error is not measured (``error="none"``): every batch stops at the last group's
    input. Otherwise all when the method measures against the dense path (cross statistics), else
    only the batches holding the first ``error_windows`` windows (the output error is a sample, as in
    the fused pass): the others stop at the last group's input, and no dense outputs beyond the
    sample are held.
    """
    if run.propagate == "dense":
        return len(inputs.hidden)
    if not run.measures_error:
        return 0
    if run.needs_cross:
        return len(inputs.hidden)
    return sample_batches(run, inputs)


def _groups(run: RunState, layer: nn.Module, linears: dict[str, nn.Module], inputs: LayerInputs,
            groups: list[list[str]] | None) -> list[list[str]]:
    """The layer's groups of linears sharing an input (the previous layer's, when the names match)."""
    if groups is not None and not {n for g in groups for n in g} - set(linears):
        return groups
    probe = inputs.head(1) if run.fused else inputs  # one window is enough to see who shares an input
    groups = discover_groups(layer, linears, lambda: run_layer(layer, probe, 0))
    missing = set(linears) - {n for g in groups for n in g}
    if missing:
        run.emit(RunWarning(message=f"never called in a forward pass, left dense: {sorted(missing)}", layer=run.layer))
    return groups


def _measured_error(run: RunState, pruned: list[Tensor], dense: list[Tensor]) -> float | None:
    """The layer output error over the windows ``dense`` holds (phase ``error``); None when not measured.

    Unmeasured, the pruned outputs of the first ``error_windows`` windows (those the error would cover)
    are still checked to be finite.
    """
    if not run.measures_error:
        left = run.cfg.error_windows
        for out in pruned:
            if left <= 0:
                break
            if not bool(torch.isfinite(out[:left]).all()):
                raise NumericalError(f"layer {run.layer}: the pruned layer's outputs are not finite")
            left -= out.shape[0]
        return None
    with run.timer.section("error"):
        error = _output_error(pruned, dense)
    windows = sum(d.shape[0] for d in dense)
    run.result.error_windows = max(windows, run.result.error_windows or 0)
    return error


def _output_error(pruned: list[Tensor], dense: list[Tensor]) -> float:
    """‖Y* − Y‖_F / ‖Y‖_F over the windows both lists hold (``pruned`` may hold more batches and windows)."""
    num = sum(float((p[: d.shape[0]] - d).float().pow(2).sum()) for p, d in zip(pruned, dense, strict=False))
    den = sum(float(d.float().pow(2).sum()) for d in dense)
    return math.sqrt(num / den) if den > 0 else 0.0


def layer_done(run: RunState, num_layers: int, error: float | None, t0: float) -> None:
    """Record the layer's output error (None: not measured) and emit LayerDone with its seconds since ``t0``."""
    if error is not None and not math.isfinite(error):
        raise NumericalError(f"layer {run.layer}: the pruned layer's outputs are not finite")
    run.result.layer_errors[run.layer] = error
    run.emit(LayerDone(layer=run.layer, num_layers=num_layers, output_rel_error=error,
                       seconds=time.perf_counter() - t0))
