"""Layer-parallel pruning on the ranks of a torch.distributed group (``--distributed``).

FISTAPruner §3.4: with dense inputs (``propagate="dense"``) the decoder layers are independent.
Rank 0 holds the model; it walks the layers in rounds of ``world_size``: for each layer of the
round it first runs the dense layer on its inputs (the next layer's inputs), then sends layer
``start + k`` with its inputs to rank ``k`` (round-robin, rank 0 keeps the first), prunes its own
layer, and receives the other ranks' outcomes in layer order. An outcome holds the written
weights of the layer's linears, the keep-masks and quantization states, the events and the
records of the solve; rank 0 writes the weights through its journal (undone on failure) and
replays masks and events into the run store, so there is one run record, in layer order.

Messages are pickled objects (``send_object_list`` / ``recv_object_list``): ranks trust each
other, as in any torch.distributed job. A rank that dies or answers nothing within the group's
timeout makes rank 0's receive raise: the run fails with :class:`DistributedError`, the model is
restored, nothing hangs. :func:`stop_workers` ends the other ranks' :func:`serve_layers` loops.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import Tensor, nn

from toolkit.engine.capture import LayerInputs
from toolkit.engine.linear import dense_next, on_device, prune_layer
from toolkit.engine.phases import PhaseTimer
from toolkit.engine.state import EngineConfig, EngineResult, RunState
from toolkit.engine.writeback import WriteBack
from toolkit.errors import DistributedError, NumericalError, ToolkitError
from toolkit.events import Event
from toolkit.methods import get_method
from toolkit.methods.quant_grid import QuantState
from toolkit.models.layers import get_weight, layer_linears
from toolkit.spec.compression import Compression

log = logging.getLogger(__name__)
FINISHED = "finished"
CPU = torch.device("cpu")


class MethodRequest(Protocol):
    """The part of a run's config a rank needs (a :class:`toolkit.run.config.RunConfig` is one)."""

    @property
    def method(self) -> str: ...  # noqa: D102 - a field of the config
    @property
    def options(self) -> dict[str, Any]: ...  # noqa: D102
    @property
    def compression(self) -> Compression: ...  # noqa: D102


@dataclass(frozen=True)
class LayerJob:
    """Decoder layer ``index`` (on the CPU, dense) with its inputs and the run's per-layer settings."""

    index: int
    num_layers: int
    layer: nn.Module
    inputs: LayerInputs
    fused: bool
    gram_limit: int | None
    forward_dtype: torch.dtype | None
    layer_dtype: torch.dtype | None = None  # the dtype the layer is held in on the device (None: as sent)
    compression: Compression | None = None  # rank 0's spec, its quantization group fitted to the model


@dataclass
class LayerOutcome:
    """What solving one layer gave: written weights (CPU, model dtype), masks, states, events, records."""

    index: int
    weights: dict[str, Tensor] = field(default_factory=dict)
    masks: list[tuple[int, str, Tensor]] = field(default_factory=list)
    quants: list[tuple[int, str, QuantState]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    result: EngineResult = field(default_factory=EngineResult)


@dataclass(frozen=True)
class LayerFailed:
    """A rank could not solve layer ``index``: the one-line error, and whether it was numerical."""

    index: int
    error: str
    numerical: bool


@dataclass(frozen=True)
class Stop:
    """Ends a rank's :func:`serve_layers` loop: ``finished``, or why rank 0 stopped."""

    reason: str


def _device_arg() -> torch.device | None:
    """The device object collectives stage through: the current GPU under nccl, none under gloo."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None


def _send(message: object, rank: int) -> None:
    dist.send_object_list([message], dst=rank, device=_device_arg())


def _receive(rank: int, what: str) -> Any:
    """The next message from ``rank``; a :class:`DistributedError` when it died or timed out."""
    box: list[Any] = [None]
    try:
        dist.recv_object_list(box, src=rank, device=_device_arg())
    except RuntimeError as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise DistributedError(f"rank {rank} gave no {what} (it died or timed out: {reason})") from exc
    return box[0]


def prune_on_ranks(run: RunState, layers: nn.ModuleList, inputs: LayerInputs) -> None:
    """Rank 0's side: prune every layer of ``layers`` in place, the work spread over the group's ranks."""
    if run.propagate != "dense":
        raise ToolkitError("--distributed needs --propagate dense: with pruned inputs each layer waits for the last")
    world = dist.get_world_size()
    pending: dict[int, int] = {}  # rank → the layer it is solving
    try:
        for start in range(0, len(layers), world):
            run.check_cancel()
            own: tuple[int, LayerInputs] | None = None
            for rank, index in enumerate(range(start, min(start + world, len(layers)))):
                # the dense outputs first: layer ``index`` is pruned afterwards, here or on another rank
                following = dense_next(run, layers[index], inputs) if index + 1 < len(layers) else inputs
                if rank == 0:
                    own = (index, inputs)
                else:
                    job = LayerJob(index, len(layers), layers[index], inputs.only().to(CPU), run.fused,
                                   run.gram_limit, run.forward_dtype, run.layer_dtype, run.compression)
                    _send(job, rank)
                    pending[rank] = index
                inputs = following
            if own is not None:
                _prune_here(run, own[0], len(layers), layers[own[0]], own[1])
            for rank in sorted(pending):
                index = pending.pop(rank)
                _apply(run, rank, layers[index], _receive(rank, f"result for layer {index}"))
    finally:
        _drain(pending)


def _prune_here(run: RunState, index: int, num_layers: int, layer: nn.Module, inputs: LayerInputs) -> None:
    with on_device(run, layer):
        prune_layer(run, index, num_layers, layer, inputs, None)
    run.result.phases.append(run.timer.layer_done(index))


def _apply(run: RunState, rank: int, layer: nn.Module, outcome: LayerOutcome | LayerFailed) -> None:
    """Write a rank's outcome into ``layer`` through the run's journal and replay it into the run's sinks."""
    if isinstance(outcome, LayerFailed):
        error = NumericalError if outcome.numerical else DistributedError
        raise error(f"rank {rank}, layer {outcome.index}: {outcome.error}")
    linears = layer_linears(layer)
    for name, weight in outcome.weights.items():
        run.writeback.weight(linears[name], weight)
    for index, name, keep in outcome.masks:
        run.on_mask(index, name, keep)
    for index, name, state in outcome.quants:
        run.on_quant(index, name, state)
    for event in outcome.events:
        run.emit(event)
    run.result.merge(outcome.result)


def _drain(pending: dict[int, int]) -> None:
    """After a failure: take the outcomes still under way (so no rank blocks sending) and drop them."""
    for rank, index in pending.items():
        try:
            _receive(rank, f"result for layer {index}")
        except DistributedError as exc:
            log.warning("%s", exc)


def stop_workers(world_size: int, reason: str) -> None:
    """Rank 0: end every other rank's :func:`serve_layers` loop (a rank that died is logged and skipped)."""
    for rank in range(1, world_size):
        try:
            _send(Stop(reason), rank)
        except RuntimeError as exc:
            log.warning("rank %d did not take the stop message: %s", rank, str(exc).strip().splitlines()[-1:])


def serve_layers(config: MethodRequest, engine_cfg: EngineConfig, device: torch.device) -> Stop:
    """A rank other than 0: solve the layers rank 0 sends (``config``: the run's RunConfig) until told to stop."""
    spec = get_method(config.method)
    method_cfg = spec.make_config(config.options)
    while True:
        message = _receive(0, "work (rank 0 died or timed out)")
        if isinstance(message, Stop):
            return message
        try:
            outcome: LayerOutcome | LayerFailed = _solve(message, RunState(
                spec, message.compression or config.compression, method_cfg, engine_cfg, device, lambda event: None,
                lambda: False, WriteBack(enabled=False)))
        except Exception as exc:  # sent to rank 0, which fails the run with it
            outcome = LayerFailed(message.index, str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                                  isinstance(exc, NumericalError))
        _send(outcome, 0)


def _solve(job: LayerJob, run: RunState) -> LayerOutcome:
    """Prune ``job.layer`` on ``run.device`` as rank 0 would, collecting what its sinks would have received."""
    outcome = LayerOutcome(index=job.index)
    run.emit, run.result = outcome.events.append, outcome.result
    run.on_mask = lambda index, name, keep: outcome.masks.append((index, name, keep))
    run.on_quant = lambda index, name, state: outcome.quants.append((index, name, state))
    run.fused, run.gram_limit, run.forward_dtype = job.fused, job.gram_limit, job.forward_dtype
    run.layer_dtype, run.timer = job.layer_dtype, PhaseTimer(run.device)
    if run.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(run.device)
    layer = job.layer
    with torch.no_grad(), on_device(run, layer):
        prune_layer(run, job.index, job.num_layers, layer, job.inputs.to(run.device), None)
        linears = layer_linears(layer)
        outcome.weights = {name: get_weight(linears[name]).detach().to(CPU)
                           for index, name in outcome.result.kept if index == job.index}
    outcome.result.phases.append(run.timer.layer_done(job.index))
    if run.device.type == "cuda":
        outcome.result.remote_gpu_peak_mb = torch.cuda.max_memory_allocated(run.device) / 2**20
    return outcome
