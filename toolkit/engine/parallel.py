"""Parallel layer pruning on several devices.

FISTAPruner §3.4: with dense inputs the decoder layers are independent units.

With ``propagate="dense"`` layer i+1 sees the *dense* outputs of layer i, so its inputs do not wait
for layer i's pruning. The calling thread walks the layers, runs each dense layer once on the main
device to make the next layer's inputs, and hands layer i with its inputs to the next free device;
one worker thread per device prunes it there (statistics, solve, write-back, events). At most one
layer is in flight per device, so memory holds at most (devices + 2) layers' inputs.

Thread safety: events and masks go through one lock (:attr:`Lane.serial`: the run store sees whole
events in the order they happened); every worker (a :class:`Lane`) keeps its own weight journal,
absorbed into the run's at the end, and the engine keeps each lane's records apart. A failure or
cancellation in any worker stops the others at their next cancellation point, and every weight
written so far is in the journal the engine restores.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from toolkit.engine.capture import LayerInputs
from toolkit.engine.options import DEVICES_AUTO
from toolkit.engine.writeback import WriteBack
from toolkit.errors import RunCancelled, ToolkitError


def resolve_devices(spec: str, main: torch.device, propagate: str,
                    check: Callable[[str], torch.device]) -> list[torch.device]:
    """The devices the layers are spread over.

    ``auto``: every CUDA device when the main device is CUDA, there are at least two and the inputs
    are dense (``propagate="dense"``); otherwise just the main device (sequential). An explicit comma
    list (``cuda:0,cuda:1``; ``cpu,cpu`` runs two CPU threads) is used as given, each name checked
    by ``check``, and needs ``propagate="dense"``: with pruned inputs layer i+1 must wait for layer i.
    """
    if spec == DEVICES_AUTO:
        count = torch.cuda.device_count() if main.type == "cuda" else 0
        if propagate == "dense" and count > 1:
            return [torch.device("cuda", i) for i in range(count)]
        return [main]
    names = [name.strip() for name in spec.split(",") if name.strip()]
    if not names:
        raise ToolkitError("devices is empty; give a comma list such as cuda:0,cuda:1 or leave it at auto")
    devices = []
    for name in names:
        try:
            devices.append(check(name))
        except ToolkitError as exc:
            raise ToolkitError(f"--devices {spec}: {exc}") from None
    if len(devices) > 1 and propagate != "dense":
        raise ToolkitError("parallel layer pruning needs dense inputs (--propagate dense): with pruned "
                           "propagation each layer waits for the previous one; or give a single device")
    return devices


@dataclass
class Lane:
    """What one worker thread gets.

    Its device, its own weight journal (merged into the run's at
    the end), a cancellation check that also fires when another worker failed, and ``serial``,
    which wraps a sink (events, masks) so that calls from every lane happen one at a time.
    """

    device: torch.device
    writeback: WriteBack
    cancelled: Callable[[], bool]
    serial: Callable[[Callable[..., None]], Callable[..., None]]


@dataclass(frozen=True)
class LayerSteps:
    """The two per-layer steps the engine supplies to :func:`prune_in_parallel`.

    ``prune_one(lane, index, layer, inputs)`` prunes one layer in place (the layer and its inputs
    already on the lane's device) and writes through ``lane.writeback``; ``dense_next(layer,
    inputs)`` returns the next layer's inputs from the dense layer on the main device.
    """

    prune_one: Callable[[Lane, int, nn.Module, LayerInputs], object]
    dense_next: Callable[[nn.Module, LayerInputs], LayerInputs]


def prune_in_parallel(
    layers: nn.ModuleList,
    inputs: LayerInputs,
    devices: list[torch.device],
    steps: LayerSteps,
    *,
    cancelled: Callable[[], bool],
    writeback: WriteBack,
) -> None:
    """Prune every layer of ``layers``, one worker thread (a :class:`Lane`) per device.

    Each layer goes through ``steps.prune_one`` on a lane; ``steps.dense_next`` makes the next layer's
    inputs on this thread (see :class:`LayerSteps`). Every lane's journal is absorbed into
    ``writeback`` at the end, also on failure, so the caller can restore.
    """
    prune_one = steps.prune_one
    lock = threading.Lock()
    abort = threading.Event()

    def serial(fn: Callable[..., None]) -> Callable[..., None]:
        def call(*args: Any) -> None:
            with lock:
                fn(*args)

        return call

    lanes = [Lane(device, WriteBack(enabled=writeback.enabled), lambda: abort.is_set() or cancelled(), serial)
             for device in devices]
    free: queue.Queue[int] = queue.Queue()
    for slot in range(len(devices)):
        free.put(slot)

    def job(slot: int, index: int, layer: nn.Module, layer_inputs: LayerInputs) -> None:
        lane = lanes[slot]
        try:
            _on_device(layer, lane.device, lambda: prune_one(lane, index, layer, layer_inputs.to(lane.device)))
        except BaseException:
            abort.set()
            raise
        finally:
            free.put(slot)

    try:
        futures = _dispatch(layers, inputs, _Slots(len(devices), free, job), steps.dense_next,
                            lambda: abort.is_set() or cancelled())
        if cancelled():
            raise RunCancelled("cancelled")
        _raise_first(futures)
    finally:
        for lane in lanes:
            writeback.absorb(lane.writeback)


def _on_device(layer: nn.Module, device: torch.device, work: Callable[[], object]) -> None:
    """Run ``work`` with ``layer`` moved to ``device`` (and back home afterwards), without autograd."""
    home = next(layer.parameters()).device
    with torch.no_grad():
        layer.to(device)
        try:
            work()
        finally:
            layer.to(home)


@dataclass(frozen=True)
class _Slots:
    """The worker slots (one per device): how many, the free ones, and the ``job(slot, index, layer, inputs)``."""

    count: int
    free: queue.Queue[int]
    job: Callable[[int, int, nn.Module, LayerInputs], None]


def _dispatch(
    layers: nn.ModuleList, inputs: LayerInputs, slots: _Slots,
    dense_next: Callable[[nn.Module, LayerInputs], LayerInputs], stop: Callable[[], bool],
) -> list[Future]:
    """Walk the layers on this thread, handing each with its dense inputs to the next free slot."""
    futures: list[Future] = []
    with ThreadPoolExecutor(max_workers=slots.count, thread_name_prefix="prune-layer") as pool:
        for index, layer in enumerate(layers):
            # the dense outputs first: once handed over, the worker writes pruned weights into layer
            following = dense_next(layer, inputs) if index + 1 < len(layers) else inputs
            slot = slots.free.get()  # wait for a device
            if stop():
                break
            futures.append(pool.submit(slots.job, slot, index, layer, inputs))
            inputs = following
    return futures


def _raise_first(futures: list[Future]) -> None:
    """Re-raise the first real failure, not the cancellations it caused in the other workers."""
    errors = [error for f in futures if (error := f.exception()) is not None]
    if errors:
        raise next((e for e in errors if not isinstance(e, RunCancelled)), errors[0])
