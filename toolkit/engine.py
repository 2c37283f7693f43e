"""The sequential layer-by-layer pruning driver (DESIGN.md "The flow of one run").

For each decoder layer i (only layer i on the device):

1. groups of linears that share an input are discovered by one probe forward (call order);
2. statistics of each group are gathered by hooks (:mod:`toolkit.gather`) — ``sequential="layer"``:
   every group in one pass over the unpruned layer; ``sequential="group"``: group g after groups
   < g were pruned (each pass stops as soon as the group's input is captured, or all groups in one
   fused pass). When the method needs the cross-Gram, a dense copy of the layer is run on the same
   inputs to give the dense-path x;
3. the method solves each linear; the engine writes the result back through a
   :class:`~toolkit.writeback.WriteBack` journal and measures it (:mod:`toolkit.linear_solve`);
4. the pruned layer runs on its inputs; ``LayerDone`` carries ‖Y* − Y‖/‖Y‖ against the dense
   layer on the same inputs; layer i+1 sees the pruned (``propagate="pruned"``) or the dense
   (``"dense"``) outputs.

A block-scope method (:attr:`Scope.BLOCK`: whole heads or channels of a decoder layer, shapes
change) is driven by :func:`toolkit.block_engine.prune_blocks` through the same journal. Every
step emits a typed event; every linear is a cancellation point. On any failure the journal is
undone (``restore_on_failure``), shapes included, so a failed run never leaves a half-pruned model.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from toolkit.capture import LayerInputs, capture_layer_inputs, run_layer
from toolkit.engine_state import (
    EngineConfig,
    EngineResult,
    MaskSink,
    QuantSink,
    RunState,
    StructureSink,
    ignore,
)
from toolkit.errors import NumericalError, ToolkitError
from toolkit.events import Event, LayerDone, LayerStarted, RunWarning
from toolkit.gather import fused_pass, gather_stats
from toolkit.linear_solve import prune_group, reconstruction_errors
from toolkit.memory import keep_freed_memory
from toolkit.methods.base import MethodSpec, Scope, Stat
from toolkit.models import decoder_layers, get_weight, layer_linears
from toolkit.parallel import Lane, LayerSteps, prune_in_parallel, resolve_devices
from toolkit.precision import AUTOCAST_DTYPES, bf16_supported, forward_precision
from toolkit.sparsity import Target, validate_for_shape
from toolkit.spec import Compression, as_compression
from toolkit.stats import discover_groups
from toolkit.writeback import WriteBack

__all__ = ["EngineConfig", "EngineResult", "check_targets", "dense_next", "prune_layer", "prune_layers",
           "reconstruction_errors", "resolve_device"]


def resolve_device(name: str) -> torch.device:
    """``auto`` → cuda when available, else cpu; otherwise the named device (checked)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ToolkitError("--device cuda was asked for but no CUDA device is available; use --device cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ToolkitError(f"unknown device {name!r}; use auto, cpu or cuda") from None
    if device.type != "cpu":
        try:  # torch.device("mps") parses on any build; only an allocation tells whether it is usable
            torch.empty(1, device=device)
        except (RuntimeError, AssertionError) as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0].split(". ")[0][:160]
            raise ToolkitError(f"device {name!r} is not usable here ({first}); use --device auto or cpu") from None
    return device


def check_targets(model: nn.Module, spec: MethodSpec, compression: Compression | Target) -> list[str]:
    """Check that ``spec`` can meet ``compression`` on every decoder-layer linear before anything changes.

    Raises a one-line :class:`ToolkitError` naming what the method supports, or which linear's
    shape does not fit the pattern. Returns the qualified names of the linears of layer 0 (for
    RunStarted).
    """
    compression = as_compression(compression)
    spec.check(compression)
    layers = decoder_layers(model)
    if compression.sparsity is not None:
        for index, layer in enumerate(layers):
            for name, module in layer_linears(layer).items():
                rows, cols = get_weight(module).shape  # (out, in)
                try:
                    validate_for_shape(compression.sparsity, (rows, cols))
                except ToolkitError as exc:
                    raise ToolkitError(f"layer {index} {name}: {exc}") from None
    return list(layer_linears(layers[0]))


def prune_layers(  # noqa: PLR0913 - keyword-only sinks, each named for what it receives
    model: nn.Module,
    windows: Tensor,
    spec: MethodSpec,
    compression: Compression | Target,
    method_cfg: object,
    *,
    cfg: EngineConfig,
    emit: Callable[[Event], None],
    cancelled: Callable[[], bool] = lambda: False,
    on_mask: MaskSink = ignore,
    on_quant: QuantSink = ignore,
    on_structure: StructureSink = ignore,
    writeback: WriteBack | None = None,
) -> EngineResult:
    """Compress every decoder layer of ``model`` in place on calibration ``windows`` (num, seq).

    ``compression`` is the run's spec (a bare sparsity target means prune only): each linear gets
    ``compression.sparsity`` as its target and ``SolveContext.quant = compression.quant``.
    ``on_mask(layer, name, keep_mask)`` and ``on_quant(layer, name, state)`` receive what each
    linear's solve produced (on the CPU); ``on_structure(change)`` each structure change of a
    block-scope method. Every change goes through ``writeback`` (a fresh journal when None).

    Raises :class:`RunCancelled` when ``cancelled()`` turns true, :class:`ToolkitError` /
    :class:`NumericalError` on bad input; on any exception the journal is undone when
    ``cfg.restore_on_failure`` (shapes included).
    """
    keep_freed_memory()
    compression = as_compression(compression)
    journal = writeback if writeback is not None else WriteBack(enabled=cfg.restore_on_failure)
    start = time.perf_counter()
    try:
        if spec.scope is Scope.BLOCK:
            result = _prune_blocks(model, windows, spec, compression, method_cfg, cfg=cfg, emit=emit,
                                   cancelled=cancelled, writeback=journal, on_structure=on_structure)
        else:
            run = RunState(spec, compression, method_cfg, cfg, resolve_device(cfg.device), emit, cancelled, journal,
                           on_mask, on_quant)
            run.forward_dtype = forward_dtype(cfg.forward_dtype, run.device, emit)
            _prune_linears(run, model, windows)
            result = run.result
    except BaseException:
        if cfg.restore_on_failure:
            journal.restore()
        raise
    result.seconds = time.perf_counter() - start
    return result


def forward_dtype(name: str, device: torch.device, emit: Callable[[Event], None]) -> torch.dtype | None:
    """The autocast dtype of the layer passes; bf16 on a device without bf16 support runs in float32 with a warning."""
    dtype = AUTOCAST_DTYPES[name]
    if dtype is torch.bfloat16 and not bf16_supported(device):
        emit(RunWarning(message=f"--forward-dtype bf16: {device.type} has no native bf16 (AVX512-BF16/AMX on CPUs, "
                                "Ampere or later GPUs); the forward passes run in float32", layer=-1))
        return None
    return dtype


def _prune_blocks(model: nn.Module, windows: Tensor, spec: MethodSpec, compression: Compression,
                  method_cfg: object, **engine: Any) -> EngineResult:
    """Dispatch a block-scope method to :mod:`toolkit.block_engine` (imported only when one runs)."""
    try:
        # an optional module, absent from some checkouts: a missing one is reported below
        from toolkit.block_engine import prune_blocks  # pyright: ignore[reportMissingImports]
    except ModuleNotFoundError as exc:
        if exc.name != "toolkit.block_engine":
            raise
        raise ToolkitError("block-scope methods need toolkit.block_engine") from None
    result = prune_blocks(model, windows, spec, compression, method_cfg, **engine)
    return result if isinstance(result, EngineResult) else EngineResult()


def _prune_linears(run: RunState, model: nn.Module, windows: Tensor) -> None:
    """The linear-scope path: layer 0's inputs captured, then every layer in order or in parallel."""
    layers = decoder_layers(model)
    run.fused = use_fused(run, model, layers[0], windows)
    if not ({Stat.GRAM, Stat.CROSS, Stat.DENSE_GRAM} & run.spec.needs):
        run.gram_limit = min(run.cfg.error_windows, windows.shape[0]) * windows.shape[1]
    devices = resolve_devices(run.cfg.devices, run.device, run.propagate, resolve_device)
    with torch.no_grad():
        batch = windows.shape[0] if run.fused else run.cfg.batch_size
        inputs = capture_layer_inputs(model, layers, windows, run.device, batch)
        if run.cfg.distributed:
            from toolkit.dist_engine import prune_on_ranks  # imports torch.distributed only when asked for

            prune_on_ranks(run, layers, inputs)
        elif len(devices) > 1:
            _prune_in_parallel(run, layers, inputs, devices)
        else:
            _prune_in_order(run, layers, inputs)


def _prune_in_order(run: RunState, layers: nn.ModuleList, inputs: LayerInputs) -> None:
    """Layer after layer on one device, each seeing the previous one's pruned or dense outputs."""
    groups: list[list[str]] | None = None
    for index, layer in enumerate(layers):
        home = next(layer.parameters()).device
        layer.to(run.device)
        try:
            groups, inputs = prune_layer(run, index, len(layers), layer, inputs, groups)
        finally:
            layer.to(home)


def _prune_in_parallel(run: RunState, layers: nn.ModuleList, inputs: LayerInputs, devices: list[torch.device]) -> None:
    """Layers spread over ``devices`` (propagate=dense); each lane keeps its own state and records."""
    lanes: dict[int, RunState] = {}

    def prune_one(lane: Lane, index: int, layer: nn.Module, layer_inputs: LayerInputs) -> None:
        if id(lane) not in lanes:  # a lane's layers run one after another on its own thread
            lanes[id(lane)] = dataclasses.replace(
                run, device=lane.device, writeback=lane.writeback, cancelled=lane.cancelled,
                emit=lane.serial(run.emit), on_mask=lane.serial(run.on_mask), on_quant=lane.serial(run.on_quant),
                result=EngineResult())
        prune_layer(lanes[id(lane)], index, len(layers), layer, layer_inputs, None)

    try:
        steps = LayerSteps(prune_one=prune_one, dense_next=lambda layer, x: dense_next(run, layer, x))
        prune_in_parallel(layers, inputs, devices, steps, cancelled=run.cancelled, writeback=run.writeback)
    finally:
        for worker in lanes.values():
            run.result.merge(worker.result)


def dense_next(run: RunState, layer: nn.Module, inputs: LayerInputs) -> LayerInputs:
    """The dense layer's outputs on the main device: the next layer's inputs under propagate=dense."""
    home = next(layer.parameters()).device
    layer.to(run.device)
    try:
        with forward_precision(run.device, run.forward_dtype):
            return inputs.next_layer([run_layer(layer, inputs, b) for b in range(len(inputs.hidden))])
    finally:
        layer.to(home)


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
    run.emit(LayerStarted(layer=index, num_layers=num_layers, groups=[list(g) for g in groups]))
    if run.fused:
        pruned, dense = fused_pass(run, layer, linears, inputs, groups)
        _layer_done(run, num_layers, _output_error([pruned], [dense]), t0)
        return groups, inputs.next_layer([pruned if run.propagate == "pruned" else dense])
    dense_copy = copy.deepcopy(layer) if run.needs_cross and run.sequential == "group" else None
    dense_out: list[Tensor] = []
    if run.sequential == "layer":
        all_stats = gather_stats(run, layer, inputs, groups, dense_out=dense_out)
        for group, stats in zip(groups, all_stats, strict=True):
            prune_group(run, linears, group, stats)
    else:
        for g, group in enumerate(groups):
            (stats,) = gather_stats(run, layer, inputs, [group], dense_out=dense_out if g == 0 else None,
                                    dense_layer=dense_copy if g > 0 else None)
            prune_group(run, linears, group, stats)
    pruned_out = [run_layer(layer, inputs, b) for b in range(len(inputs.hidden))]
    _layer_done(run, num_layers, _output_error(pruned_out, dense_out), t0)
    nxt = pruned_out if run.propagate == "pruned" else dense_out
    return groups, inputs.next_layer(nxt)


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


def _output_error(pruned: list[Tensor], dense: list[Tensor]) -> float:
    """‖Y* − Y‖_F / ‖Y‖_F over the windows both lists hold (``pruned`` may hold more)."""
    num = sum(float((p[: d.shape[0]] - d).float().pow(2).sum()) for p, d in zip(pruned, dense, strict=True))
    den = sum(float(d.float().pow(2).sum()) for d in dense)
    return math.sqrt(num / den) if den > 0 else 0.0


def _layer_done(run: RunState, num_layers: int, error: float, t0: float) -> None:
    if not math.isfinite(error):
        raise NumericalError(f"layer {run.layer}: the pruned layer's outputs are not finite")
    run.emit(LayerDone(layer=run.layer, num_layers=num_layers, output_rel_error=error,
                       seconds=time.perf_counter() - t0))
