"""Parallel layer pruning on several devices (FISTAPruner §3.4: with dense inputs the decoder
layers are independent units).

With ``propagate="dense"`` layer i+1 sees the *dense* outputs of layer i, so its inputs do not wait
for layer i's pruning. The calling thread walks the layers, runs each dense layer once on the main
device to make the next layer's inputs, and hands layer i with its inputs to the next free device;
one worker thread per device prunes it there (statistics, solve, write-back, events). At most one
layer is in flight per device, so memory holds at most (devices + 2) layers' inputs.

Thread safety: events and masks go through one lock (the run store sees whole events in the order
they happened); every worker keeps its own records and weight backups, merged in layer order at
the end. A failure or cancellation in any worker stops the others at their next cancellation
point, and every weight written so far is in the backups the engine restores.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch import nn

from toolkit.capture import LayerInputs
from toolkit.engine_options import DEVICES_AUTO
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
    devices = [check(name) for name in names]
    if len(devices) > 1 and propagate != "dense":
        raise ToolkitError("parallel layer pruning needs dense inputs (--propagate dense): with pruned "
                           "propagation each layer waits for the previous one; or give a single device")
    return devices


def prune_in_parallel(
    run: Any,
    layers: nn.ModuleList,
    inputs: LayerInputs,
    devices: list[torch.device],
    prune_one: Callable[[Any, int, nn.Module, LayerInputs], object],
    dense_next: Callable[[nn.Module, LayerInputs], LayerInputs],
) -> None:
    """Prune every layer of ``layers``, one worker thread per device.

    ``run`` is the engine's run state (a dataclass with ``emit``, ``on_mask``, ``cancelled``,
    ``device``, ``result`` and ``backup``); each worker gets a copy on its own device.
    ``prune_one(worker_run, index, layer, inputs)`` prunes one layer in place (the layer and its
    inputs already on the worker's device); ``dense_next(layer, inputs)`` returns the next layer's
    inputs from the dense layer on the main device.
    """
    lock = threading.Lock()
    abort = threading.Event()

    def locked(fn: Callable[..., None]) -> Callable[..., None]:
        def call(*args: Any) -> None:
            with lock:
                fn(*args)

        return call

    workers = [dataclasses.replace(run, device=device, result=type(run.result)(), backup=[], emit=locked(run.emit),
                                   on_mask=locked(run.on_mask),
                                   cancelled=lambda: abort.is_set() or run.cancelled())
               for device in devices]
    free: queue.Queue[int] = queue.Queue()
    for slot in range(len(devices)):
        free.put(slot)

    def job(slot: int, index: int, layer: nn.Module, layer_inputs: LayerInputs) -> None:
        worker = workers[slot]
        home = next(layer.parameters()).device
        try:
            with torch.no_grad():
                layer.to(worker.device)
                try:
                    prune_one(worker, index, layer, layer_inputs.to(worker.device))
                finally:
                    layer.to(home)
        except BaseException:
            abort.set()
            raise
        finally:
            free.put(slot)

    futures: list[Future] = []
    try:
        with ThreadPoolExecutor(max_workers=len(devices), thread_name_prefix="prune-layer") as pool:
            for index, layer in enumerate(layers):
                # the dense outputs first: once handed over, the worker writes pruned weights into layer
                following = dense_next(layer, inputs) if index + 1 < len(layers) else inputs
                slot = free.get()  # wait for a device
                if abort.is_set() or run.cancelled():
                    break
                futures.append(pool.submit(job, slot, index, layer, inputs))
                inputs = following
        if run.cancelled():
            raise RunCancelled("cancelled")
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:  # the first real failure, not the cancellations it caused in the other workers
            raise next((e for e in errors if not isinstance(e, RunCancelled)), errors[0])
    finally:
        for worker in workers:
            run.backup.extend(worker.backup)
    for worker in workers:
        run.result.zeros += worker.result.zeros
        run.result.total += worker.result.total
        run.result.layers.extend(worker.result.layers)
    run.result.layers.sort(key=lambda record: record["layer"])  # stable: linears keep their order
