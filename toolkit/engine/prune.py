"""The sequential layer-by-layer compression driver: check the targets, then dispatch on the method's scope.

A linear-scope method: layer 0's inputs are captured once, then every decoder layer is pruned by
:func:`toolkit.engine.linear.prune_layer` in order, on several devices in a pipeline
(:mod:`toolkit.engine.parallel`) or on several processes (:mod:`toolkit.engine.ranks`). A
block-scope method (:attr:`Scope.BLOCK`: whole heads or channels of a decoder layer, shapes change)
is driven by :func:`toolkit.engine.block.driver.prune_blocks` through the same journal. On any
failure the journal is undone (``restore_on_failure``), shapes included, so a failed run never
leaves a half-pruned model.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from toolkit.engine.allocation import plan_allocation
from toolkit.engine.block.driver import prune_blocks
from toolkit.engine.capture import LayerInputs, capture_layer_inputs
from toolkit.engine.data_free import needs_calibration, prune_without_data
from toolkit.engine.linear import dense_next, on_device, prune_layer, use_fused
from toolkit.engine.parallel import Lane, LayerSteps, prune_in_parallel, resolve_devices
from toolkit.engine.phases import PhaseTimer
from toolkit.engine.ranks import prune_on_ranks
from toolkit.engine.state import (
    EngineConfig,
    EngineResult,
    MaskSink,
    QuantSink,
    RunState,
    StructureSink,
    ignore,
    journal_budget_bytes,
)
from toolkit.engine.writeback import WriteBack
from toolkit.errors import ToolkitError
from toolkit.events import Event
from toolkit.methods.base import MethodSpec, Scope, Stat
from toolkit.models.layers import decoder_layers, get_weight, layer_linears
from toolkit.runtime.devices import forward_dtype, resolve_device
from toolkit.runtime.mapped import release_replaced
from toolkit.runtime.memory import KEEP_FREED_MAX_LAYER_BYTES, keep_freed_memory, return_freed_memory
from toolkit.runtime.placement import storage_dtype
from toolkit.runtime.precision import DTYPE_NAMES, layer_precision
from toolkit.spec.compression import Compression, as_compression
from toolkit.spec.targets import Target, validate_for_shape


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
    layers = decoder_layers(model)
    large = sum(p.numel() for p in layers[0].parameters()) * 4 > KEEP_FREED_MAX_LAYER_BYTES
    if large:
        return_freed_memory()
    else:
        keep_freed_memory()
    compression = as_compression(compression)
    journal = writeback if writeback is not None else WriteBack(enabled=cfg.restore_on_failure,
                                                                budget_bytes=journal_budget_bytes(cfg, large))
    start = time.perf_counter()
    run: RunState | None = None
    try:
        if spec.scope is Scope.BLOCK:
            result = _prune_blocks(model, windows, spec, compression, method_cfg, cfg=cfg, emit=emit,
                                   cancelled=cancelled, writeback=journal, on_structure=on_structure)
        else:
            run = RunState(spec, compression, method_cfg, cfg, resolve_device(cfg.device), emit, cancelled, journal,
                           on_mask, on_quant)
            set_precision(run, layers)
            if needs_calibration(spec, compression, cfg):
                _prune_linears(run, model, windows)
            else:  # magnitude, RTN: every linear from its weight alone, no input ever computed
                prune_without_data(run, model)
            result = run.result
    except BaseException as exc:
        if cfg.restore_on_failure:
            journal.restore()
        if isinstance(exc, torch.OutOfMemoryError):
            raise out_of_memory_error(exc, run, "the model was restored") from None
        raise
    finally:
        if writeback is None:  # a caller's journal stays theirs to undo (the Layer lab)
            journal.discard()
    result.seconds = time.perf_counter() - start
    return result


def set_precision(run: RunState, layers: nn.Module) -> None:
    """The dtypes of the run: storage (the decoder ``layers``'), layers on the device, autocast; in the result."""
    storage = storage_dtype(layers)
    precision = layer_precision(storage, forward_dtype(run.cfg.forward_dtype, run.device, run.emit))
    run.forward_dtype, run.layer_dtype, run.storage_dtype = precision.autocast, precision.layer_dtype, storage
    run.timer = PhaseTimer(run.device)
    run.result.precision = {"storage": DTYPE_NAMES.get(storage, str(storage)), "forward": precision.forward,
                            "layer_on_device": DTYPE_NAMES.get(precision.layer_dtype, str(precision.layer_dtype)),
                            "statistics": "float32", "solve": "float32"}


def out_of_memory_error(exc: BaseException, run: RunState | None, kept: str) -> ToolkitError:
    """One line for a run that ran out of memory: the layer, the device, the memory asked, what to lower.

    ``kept`` says what was left as it was (the model restored; the streamed source untouched).
    """
    found = re.search(r"Tried to allocate ([\d.]+ ?[KMGT]?i?B)", str(exc))
    asked = found.group(1) if found else "more than was free"
    where = f"layer {run.layer} on {run.device}" if run is not None else "the run"
    also = "" if run is not None and run.device.type == "cpu" else ", or use --device cpu"
    return ToolkitError(f"out of memory in {where} (tried to allocate {asked}); {kept}; lower "
                        f"--nsamples, --seqlen or --batch-size{also}")


def _prune_blocks(model: nn.Module, windows: Tensor, spec: MethodSpec, compression: Compression,
                  method_cfg: object, **engine: Any) -> EngineResult:
    """Dispatch a block-scope method to :func:`toolkit.engine.block.driver.prune_blocks`."""
    result = prune_blocks(model, windows, spec, compression, method_cfg, **engine)
    return result if isinstance(result, EngineResult) else EngineResult()


def capture_first_inputs(run: RunState, model: nn.Module, layers: nn.ModuleList, windows: Tensor) -> LayerInputs:
    """Decide the run's pass layout (fused, sampled statistics), then capture layer 0's inputs (phase ``capture``)."""
    run.fused = use_fused(run, model, layers[0], windows)
    if not ({Stat.GRAM, Stat.CROSS, Stat.DENSE_GRAM} & run.spec.needs):
        run.gram_limit = min(run.cfg.error_windows, windows.shape[0]) * windows.shape[1]
    batch = windows.shape[0] if run.fused else run.cfg.batch_size
    with run.timer.section("capture"):
        former = [t.data for t in [*model.parameters(), *model.buffers()]]  # the embeddings are upcast and back
        inputs = capture_layer_inputs(model, layers, windows, run.device, batch, run.layer_dtype)
        release_replaced(former)  # the mapped pages the capture read: the embeddings are held as a copy now
        return inputs


def _prune_linears(run: RunState, model: nn.Module, windows: Tensor) -> None:
    """The linear-scope path: layer 0's inputs captured, then every layer in order or in parallel."""
    layers = decoder_layers(model)
    devices = resolve_devices(run.cfg.devices, run.device, run.propagate, resolve_device)
    with torch.no_grad():
        inputs = capture_first_inputs(run, model, layers, windows)
        plan_allocation(run, layers, inputs)
        run.result.phases.append(run.timer.layer_done(-1))
        if run.cfg.distributed:
            prune_on_ranks(run, layers, inputs)
        elif len(devices) > 1:
            _prune_in_parallel(run, layers, inputs, devices)
        else:
            _prune_in_order(run, layers, inputs)


def _prune_in_order(run: RunState, layers: nn.ModuleList, inputs: LayerInputs) -> None:
    """Layer after layer on one device, each seeing the previous one's pruned or dense outputs."""
    groups: list[list[str]] | None = None
    for index, layer in enumerate(layers):
        with on_device(run, layer):
            groups, inputs = prune_layer(run, index, len(layers), layer, inputs, groups)
        run.result.phases.append(run.timer.layer_done(index))


def _prune_in_parallel(run: RunState, layers: nn.ModuleList, inputs: LayerInputs, devices: list[torch.device]) -> None:
    """Layers spread over ``devices`` (propagate=dense); each lane keeps its own state and records."""
    lanes: dict[int, RunState] = {}

    def prune_one(lane: Lane, index: int, layer: nn.Module, layer_inputs: LayerInputs) -> None:
        if id(lane) not in lanes:  # a lane's layers run one after another on its own thread
            lanes[id(lane)] = dataclasses.replace(
                run, device=lane.device, writeback=lane.writeback, cancelled=lane.cancelled,
                emit=lane.serial(run.emit), on_mask=lane.serial(run.on_mask), on_quant=lane.serial(run.on_quant),
                result=EngineResult(), timer=PhaseTimer(lane.device))
        worker = lanes[id(lane)]
        with on_device(worker, layer):  # on the lane's device already: held in the run's layer dtype
            prune_layer(worker, index, len(layers), layer, layer_inputs, None)
        worker.result.phases.append(worker.timer.layer_done(index))

    try:
        steps = LayerSteps(prune_one=prune_one, dense_next=lambda layer, x: dense_next(run, layer, x))
        prune_in_parallel(layers, inputs, devices, steps, cancelled=run.cancelled, writeback=run.writeback)
    finally:
        for worker in lanes.values():
            run.result.merge(worker.result)
