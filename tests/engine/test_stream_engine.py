"""Streamed pruning gives the in-memory path's keep-masks and weights, and leaves nothing behind when it fails."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from tests.helpers.failing import exploding
from tests.models.test_stream import save_tiny
from toolkit.data.text import CalibSpec, calibration_windows
from toolkit.engine.prune import prune_layers
from toolkit.engine.state import EngineConfig
from toolkit.engine.stream import prune_streaming
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import LayerDone, SublayerPruned
from toolkit.methods import get_method
from toolkit.models.load import load_model
from toolkit.models.stream import open_streamed
from toolkit.spec.targets import Unstructured

CFG = EngineConfig(device="cpu", batch_size=2)


def _windows() -> torch.Tensor:
    tokens = torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(0))
    return calibration_windows(tokens, CalibSpec("x", 4, 32, 0))


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    return {"llama-bf16-sharded": save_tiny(root / "llama-sharded", "llama", "bfloat16", shard_size="50KB"),
            "llama-fp32": save_tiny(root / "llama-fp32", "llama", "float32"),
            "qwen2-bf16": save_tiny(root / "qwen2", "qwen2", "bfloat16"),
            "opt-bf16": save_tiny(root / "opt", "opt", "bfloat16"),
            "gpt2-bf16": save_tiny(root / "gpt2", "gpt2", "bfloat16")}  # Conv1D weights stored (in, out)


def _in_memory(source: Path, method: str) -> tuple[dict, list, dict[str, torch.Tensor], dict]:
    spec, masks, events = get_method(method), {}, []
    model = load_model(str(source)).model
    result = prune_layers(model, _windows(), spec, Unstructured(0.5), spec.make_config(), cfg=CFG, emit=events.append,
                          on_mask=lambda layer, name, keep: masks.__setitem__((layer, name), keep))
    return masks, events, model.state_dict(), result.precision


@pytest.mark.parametrize(("source", "method"), [
    ("llama-bf16-sharded", "sparsegpt"), ("llama-fp32", "wanda"), ("llama-fp32", "sparsegpt"),
    ("qwen2-bf16", "wanda"), ("opt-bf16", "sparsegpt"), ("gpt2-bf16", "wanda"),
])
def test_streamed_equals_in_memory(sources: dict[str, Path], tmp_path: Path, source: str, method: str) -> None:
    folder = sources[source]
    before = _digest(folder)
    masks, events, state, precision = _in_memory(folder, method)
    spec, streamed_masks, streamed_events = get_method(method), {}, []
    result = prune_streaming(open_streamed(folder), tmp_path / "out", _windows(), spec, Unstructured(0.5),
                             spec.make_config(), cfg=CFG, emit=streamed_events.append,
                             on_mask=lambda layer, name, keep: streamed_masks.__setitem__((layer, name), keep))
    assert streamed_masks.keys() == masks.keys() and len(masks) > 0
    for key, keep in masks.items():
        assert torch.equal(streamed_masks[key], keep), key
    assert [type(e) for e in streamed_events] == [type(e) for e in events]
    errors = [(e.layer, e.output_rel_error) for e in events if isinstance(e, LayerDone)]
    assert [(e.layer, e.output_rel_error) for e in streamed_events if isinstance(e, LayerDone)] == errors
    assert result.achieved_sparsity == pytest.approx(0.5)
    assert result.precision == precision
    assert [r["layer"] for r in result.phases] == [-1, 0, 1] and all("copies" in r for r in result.phases)
    out = load_model(str(tmp_path / "out"))
    saved = out.model.state_dict()
    assert saved.keys() == state.keys()
    for key, value in state.items():
        assert saved[key].dtype == value.dtype and torch.equal(saved[key], value), key
    dtype = "bfloat16" if "bf16" in source else "float32"
    assert json.loads((tmp_path / "out" / "config.json").read_text())["dtype"] == dtype
    assert {p.dtype for p in out.model.parameters()} == {getattr(torch, dtype)}
    assert _digest(folder) == before  # the source is only read
    assert not (tmp_path / "out.partial").exists()


@pytest.mark.parametrize(("method", "engine", "words"), [
    ("flap", {}, "block-scope method"),
    ("wanda", {"distributed": True}, "drop --distributed"),
    ("wanda", {"devices": "cpu,cpu", "propagate": "dense"}, "give one device"),
])
def test_refused_options(sources: dict[str, Path], tmp_path: Path, method: str, engine: dict, words: str) -> None:
    spec = get_method(method)
    with pytest.raises(ToolkitError, match=words):
        prune_streaming(open_streamed(sources["opt-bf16"]), tmp_path / "out", _windows(), spec, Unstructured(0.5),
                        spec.make_config(), cfg=EngineConfig(device="cpu", **engine), emit=lambda e: None)
    assert list(tmp_path.iterdir()) == []


def test_refuses_a_folder_holding_a_checkpoint(sources: dict[str, Path], tmp_path: Path) -> None:
    folder = sources["opt-bf16"]
    before = _digest(folder)
    spec, events = get_method("wanda"), []
    with pytest.raises(ToolkitError, match="already holds a checkpoint"):
        prune_streaming(open_streamed(folder), folder, _windows(), spec, Unstructured(0.5), spec.make_config(),
                        cfg=CFG, emit=events.append)
    assert events == [] and _digest(folder) == before
    assert not folder.with_name(folder.name + ".partial").exists()


def test_failing_run_leaves_nothing(sources: dict[str, Path], tmp_path: Path) -> None:
    streamed = open_streamed(sources["qwen2-bf16"])
    events: list = []
    with pytest.raises(ToolkitError, match="boom"):
        prune_streaming(streamed, tmp_path / "out", _windows(), exploding(1), Unstructured(0.5),
                        get_method("magnitude").make_config(), cfg=CFG, emit=events.append)
    assert any(isinstance(e, LayerDone) for e in events), "layer 0 was written before the failure"
    assert list(tmp_path.iterdir()) == []
    assert {p.device.type for p in streamed.layers.parameters()} == {"meta"}  # the failed layer was released


def test_out_of_memory_mid_layer_leaves_no_partial_checkpoint(sources: dict[str, Path], tmp_path: Path) -> None:
    """A device that runs out of memory in layer 1 (layer 0 already written): one line naming the layer and the
    memory asked, no ``out`` and no ``out.partial`` left, the source untouched."""
    folder = sources["qwen2-bf16"]
    before = _digest(folder)
    streamed = open_streamed(folder)

    def out_of_memory() -> BaseException:
        return torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has 80 GiB")

    events: list = []
    with pytest.raises(ToolkitError, match=r"out of memory in layer 1 .*tried to allocate 20\.00 GiB.*nothing was "
                                           r"written and the source is untouched"):
        prune_streaming(streamed, tmp_path / "out", _windows(), exploding(1, out_of_memory), Unstructured(0.5),
                        get_method("magnitude").make_config(), cfg=CFG, emit=events.append)
    assert any(isinstance(e, LayerDone) for e in events), "layer 0 was written before the failure"
    assert list(tmp_path.iterdir()) == [] and _digest(folder) == before


def test_cancelled_run_leaves_nothing(sources: dict[str, Path], tmp_path: Path) -> None:
    spec, seen = get_method("wanda"), []
    with pytest.raises(RunCancelled):
        prune_streaming(open_streamed(sources["llama-fp32"]), tmp_path / "out", _windows(), spec, Unstructured(0.5),
                        spec.make_config(), cfg=CFG, emit=seen.append,
                        cancelled=lambda: sum(isinstance(e, SublayerPruned) for e in seen) >= 9)
    assert any(isinstance(e, LayerDone) for e in seen)
    assert list(tmp_path.iterdir()) == []
