"""Prune a checkpoint larger than host memory: decoder layers streamed from its shards, written to new ones.

The linear-scope driver of :func:`toolkit.engine.prune.prune_layers`, with one difference: the model
comes from :func:`toolkit.models.stream.open_streamed` (decoder layers on the meta device), so each
layer is loaded from the source shards before it is pruned, written to its own shard of the output
by :class:`toolkit.models.stream.ShardWriter` as soon as it is done, and released. Host memory is one
layer plus the activations plus the embeddings. Everything else — layer 0's capture, the groups,
the statistics, the solves, the propagation, the events — is :func:`toolkit.engine.linear.prune_layer`,
so the keep-masks and weights equal the in-memory path's on the same checkpoint.

With quantization (``--quant``, rtn, gptq or awp), each layer's quantized linears are written packed as
compressed-tensors ``pack-quantized`` (:class:`toolkit.models.stream_quant.LayerPacker`) with the layer, and
their states are dropped once written, so the output is the checkpoint an in-memory quantized ``--save-model``
writes, and host memory stays one layer.

The source checkpoint is never written, so no undo journal is kept (``WriteBack(enabled=False)``);
on any failure or cancel the output's ``.partial`` folder is removed. Loading, releasing and writing
layers is charged to the ``copies`` phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from toolkit.engine.allocation import plan_allocation
from toolkit.engine.linear import on_device, prune_layer
from toolkit.engine.options import DEVICES_AUTO
from toolkit.engine.prune import capture_first_inputs, check_targets, out_of_memory_error, set_precision
from toolkit.engine.state import EngineConfig, EngineResult, MaskSink, QuantSink, RunState, ignore
from toolkit.engine.writeback import WriteBack
from toolkit.errors import ToolkitError
from toolkit.events import Event
from toolkit.methods.base import MethodSpec, Scope
from toolkit.methods.quant_grid import QuantState
from toolkit.models.quant_checkpoint import check_savable, qualified_names
from toolkit.models.stream import ShardWriter, StreamedModel
from toolkit.models.stream_quant import LayerPacker
from toolkit.runtime.devices import resolve_device
from toolkit.runtime.mapped import release_replaced
from toolkit.runtime.memory import KEEP_FREED_MAX_LAYER_BYTES, return_freed_memory
from toolkit.spec.allocation import OWL
from toolkit.spec.compression import Compression, as_compression
from toolkit.spec.targets import Target

__all__ = ["check_streamable", "prune_streaming"]


def check_streamable(spec: MethodSpec, cfg: EngineConfig) -> None:
    """Raise a one-line :class:`ToolkitError` for what streaming cannot do: block scope, distributed, many devices."""
    if spec.scope is Scope.BLOCK:
        raise ToolkitError(f"{spec.name} is a block-scope method (it removes heads and channels across layers); "
                           "streaming runs linear-scope methods only: prune this model in memory, or pick a "
                           "linear-scope method")
    if cfg.distributed:
        raise ToolkitError("streaming runs in one process: drop --distributed (or stream without it)")
    if cfg.allocation.kind == OWL:
        raise ToolkitError("--allocation owl scores every dense layer before pruning, which streaming cannot hold: "
                           "give the ratios of an in-memory run as --allocation FILE.json")
    names = [name for name in cfg.devices.split(",") if name.strip()]
    if cfg.devices != DEVICES_AUTO and len(names) > 1:
        raise ToolkitError(f"streaming prunes one layer at a time on one device; --devices {cfg.devices} names "
                           f"{len(names)}: give one device (--device) or leave --devices at auto")


def prune_streaming(  # noqa: PLR0913 - the entry mirrors prune_layers (keyword-only sinks)
    streamed: StreamedModel,
    out_folder: str | Path,
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
) -> EngineResult:
    """Compress every decoder layer of ``streamed`` on calibration ``windows`` (num, seq) into ``out_folder``.

    Checks first, writing nothing: the method and engine options stream (:func:`check_streamable`),
    the method meets ``compression`` on every linear (shapes read on meta), ``out_folder`` is new or
    empty (:class:`ShardWriter`). Then layer 0's inputs are captured with the layers on meta, and each
    layer in turn is loaded, pruned as :func:`toolkit.engine.prune.prune_layers` prunes it
    (``on_mask`` / ``on_quant`` receive each linear's results), written and released. ``out_folder``
    then holds a checkpoint in the source's storage dtype that :func:`toolkit.models.load.load_model`
    and ``AutoModelForCausalLM.from_pretrained`` load.

    Raises :class:`RunCancelled` when ``cancelled()`` turns true, :class:`ToolkitError` /
    :class:`NumericalError` on bad input; on any exception ``<out_folder>.partial`` is removed and
    nothing is left at ``out_folder``. The source checkpoint is only read. ``streamed`` ends with
    every decoder layer back on meta.
    """
    check_streamable(spec, cfg)
    if sum(p.numel() for p in streamed.layers[0].parameters()) * 4 > KEEP_FREED_MAX_LAYER_BYTES:
        return_freed_memory()  # large layers: freed activations and scores go back to the kernel (runtime/memory.py)
    compression = as_compression(compression)
    if compression.quant is not None and not spec.saves_quant:
        raise ToolkitError(f"{spec.name} results cannot be saved as a quantized checkpoint (its weight needs 1/s "
                           "folded into the preceding op), and streaming writes the checkpoint as it goes: quantize "
                           "with rtn, gptq or awp, or run in memory")
    model = streamed.loaded.model
    check_targets(model, spec, compression)
    if compression.quant is not None:
        check_savable(model, compression.quant)
    packer = LayerPacker(qualified_names(model)) if compression.quant is not None else None
    writer = ShardWriter(out_folder)
    start = time.perf_counter()
    run = RunState(spec, compression, method_cfg, cfg, resolve_device(cfg.device), emit, cancelled,
                   WriteBack(enabled=False), *_sinks(packer, on_mask, on_quant))
    try:
        set_precision(run, streamed.layers)
        _stream_layers(run, streamed, writer, windows, packer)
        writer.finish(model.config, streamed.loaded.codec, copy_from=streamed.folder,
                      before_rename=lambda partial: None if packer is None else packer.write_config(model, partial))
    except BaseException as exc:
        writer.abort()
        if isinstance(exc, torch.OutOfMemoryError):
            raise out_of_memory_error(exc, run, "nothing was written and the source is untouched") from None
        raise
    run.result.seconds = time.perf_counter() - start
    return run.result


def _sinks(packer: LayerPacker | None, on_mask: MaskSink, on_quant: QuantSink) -> tuple[MaskSink, QuantSink]:
    """The run's sinks: the caller's, and with quantization the packer's collector too (the mask first)."""
    if packer is None:
        return on_mask, on_quant

    def mask(layer: int, name: str, keep: Tensor) -> None:
        on_mask(layer, name, keep)
        packer.collector.mask(layer, name, keep)

    def quant(layer: int, name: str, state: QuantState) -> None:
        on_quant(layer, name, state)
        packer.collector.quant(layer, name, state)

    return mask, quant


def _stream_layers(run: RunState, streamed: StreamedModel, writer: ShardWriter, windows: Tensor,
                   packer: LayerPacker | None) -> None:
    """Capture layer 0's inputs (layers on meta), write the rest, then load, prune, write, release each layer."""
    model, layers = streamed.loaded.model, streamed.layers
    with torch.no_grad():
        inputs = capture_first_inputs(run, model, layers, windows)  # the layers on meta: the capture skips them
        plan_allocation(run, layers, inputs)  # a ratio file (OWL needs every dense layer: check_streamable refuses it)
        with run.timer.section("copies"):
            writer.write_rest(streamed.rest_tensors())
            release_replaced(list(streamed.rest_tensors().values()))  # their mapped pages, read for the writing
        run.result.phases.append(run.timer.layer_done(-1))
        groups: list[list[str]] | None = None
        for index, layer in enumerate(layers):
            run.check_cancel()
            with run.timer.section("copies"):
                streamed.load_layer(index, layer)
            try:
                with on_device(run, layer):
                    groups, inputs = prune_layer(run, index, len(layers), layer, inputs, groups)
                with run.timer.section("copies"):
                    tensors = streamed.layer_tensors(index, layer)
                    writer.write_layer(index, tensors if packer is None else packer.pack(index, tensors))
                    del tensors
            finally:
                with run.timer.section("copies"):
                    streamed.release_layer(index, layer)
            run.result.phases.append(run.timer.layer_done(index))
