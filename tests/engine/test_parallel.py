"""Parallel layer pruning (propagate=dense): several worker threads give the sequential result."""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch

from tests.helpers.pruning_compare import Pruned, assert_same_pruning
from toolkit.data.text import CalibSpec, calibration_windows
from toolkit.engine.parallel import resolve_devices
from toolkit.engine.prune import prune_layers
from toolkit.engine.state import EngineConfig
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import SublayerPruned
from toolkit.methods import get_method
from toolkit.models.layers import decoder_layers, get_weight, layer_linears
from toolkit.models.load import load_model
from toolkit.runtime.devices import resolve_device
from toolkit.spec.targets import NM, Unstructured


def _windows() -> torch.Tensor:
    tokens = torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(2))
    return calibration_windows(tokens, CalibSpec("x", 4, 32, 0))


def _weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [get_weight(m).clone() for layer in decoder_layers(model) for m in layer_linears(layer).values()]


def _prune(method: str, target: object, devices: str) -> tuple[Pruned, object]:
    model = load_model("tiny-llama").model
    spec = get_method(method)
    events: list = []
    run = Pruned()

    def emit(event: object) -> None:
        events.append(event)
        threads.add(threading.current_thread().name)

    threads: set[str] = set()
    result = prune_layers(model, _windows(), spec, target, spec.make_config(), emit=emit, on_mask=run.on_mask,
                          cfg=EngineConfig(propagate="dense", devices=devices))
    result.threads = threads
    return run.finish(model, events), result


@pytest.mark.parametrize(("method", "target"), [("fista", Unstructured(0.5)), ("sparsegpt", NM(2, 4))])
def test_two_workers_give_the_sequential_result(method: str, target: object) -> None:
    serial, serial_result = _prune(method, target, "cpu")
    parallel, parallel_result = _prune(method, target, "cpu,cpu")
    assert_same_pruning(parallel, serial, score_is_weight=method == "fista", rtol=1e-4, atol=1e-6)
    assert len(parallel_result.threads) == 2 and serial_result.threads == {threading.current_thread().name}
    assert parallel_result.achieved_sparsity == pytest.approx(serial_result.achieved_sparsity)
    keys = [(r["layer"], r["name"]) for r in parallel_result.layers]
    assert keys == [(r["layer"], r["name"]) for r in serial_result.layers]  # merged in layer order
    assert sorted(parallel.order) == sorted(serial.order) and len(parallel.output_errors) == 2


def test_parallel_needs_dense_inputs() -> None:
    with pytest.raises(ToolkitError, match="--propagate dense"):
        resolve_devices("cpu,cpu", torch.device("cpu"), "pruned", resolve_device)
    with pytest.raises(ToolkitError, match="empty"):
        resolve_devices(" , ", torch.device("cpu"), "dense", resolve_device)
    with pytest.raises(ToolkitError, match="unknown device"):
        resolve_devices("cpu,warp9", torch.device("cpu"), "dense", resolve_device)
    assert resolve_devices("auto", torch.device("cpu"), "dense", resolve_device) == [torch.device("cpu")]


def test_cancel_in_a_worker_restores_every_weight() -> None:
    model = load_model("tiny-llama").model
    before = _weights(model)
    spec = get_method("sparsegpt")
    seen: list = []

    def cancelled() -> bool:  # cancel once the first linear of any layer was written
        return any(isinstance(e, SublayerPruned) for e in seen)

    with pytest.raises(RunCancelled):
        prune_layers(model, _windows(), spec, Unstructured(0.5), spec.make_config(), emit=seen.append,
                     cancelled=cancelled, cfg=EngineConfig(propagate="dense", devices="cpu,cpu"))
    assert any(isinstance(e, SublayerPruned) for e in seen)
    for a, b in zip(before, _weights(model), strict=True):
        assert torch.equal(a, b)


def test_a_failing_worker_is_reported_and_restored() -> None:
    model = load_model("tiny-llama").model
    before = _weights(model)
    spec = get_method("magnitude")
    calls = {"n": 0}
    original = spec.fn

    def flaky(W: torch.Tensor, *args: object) -> object:
        calls["n"] += 1
        if calls["n"] == 9:  # after eight linears were written
            raise ToolkitError("boom in a worker")
        return original(W, *args)

    spec = dataclasses.replace(spec, fn=flaky)
    with pytest.raises(ToolkitError, match="boom in a worker"):
        prune_layers(model, _windows(), spec, Unstructured(0.5), spec.make_config(), emit=lambda e: None,
                     cfg=EngineConfig(propagate="dense", devices="cpu,cpu"))
    assert calls["n"] >= 9
    for a, b in zip(before, _weights(model), strict=True):
        assert torch.equal(a, b)
