"""Streamed quantization (``--stream --quant``): the in-memory checkpoint, layer by layer, evaluated streamed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.models.test_stream import save_tiny
from toolkit.api import RunConfig, prune_model
from toolkit.data.text import CalibSpec, calibration_windows
from toolkit.engine.prune import prune_layers
from toolkit.engine.state import EngineConfig
from toolkit.engine.stream import prune_streaming
from toolkit.engine.stream_eval import streamed_perplexity
from toolkit.errors import ToolkitError
from toolkit.evaluation.perplexity import perplexity
from toolkit.methods import get_method
from toolkit.models.load import load_model
from toolkit.models.quant_checkpoint import StateCollector, save_run_checkpoint
from toolkit.models.sources import SAFETENSORS_INDEX
from toolkit.models.stream import layer_shard, open_streamed
from toolkit.models.stream_quant import LayerPacker
from toolkit.spec.compression import Compression, QuantSpec
from toolkit.spec.targets import Unstructured

CFG = EngineConfig(device="cpu", batch_size=2)
CPU = torch.device("cpu")
INT4 = QuantSpec(4, 32)


def _windows(count: int = 4, seed: int = 0) -> torch.Tensor:
    tokens = torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(seed))
    return calibration_windows(tokens, CalibSpec("x", count, 32, seed))


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        out.update(load_file(shard))
    return out


def _quant_config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())["quantization_config"]


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    return {"llama-fp32": save_tiny(root / "llama", "llama", "float32", shard_size="50KB"),
            "qwen2-bf16": save_tiny(root / "qwen2", "qwen2", "bfloat16")}  # biases on q, k, v


def _compression(method: str) -> Compression:
    return Compression(Unstructured(0.5) if method == "awp" else None, INT4)


def _in_memory(source: Path, method: str, out: Path) -> torch.nn.Module:
    """The in-memory run and its --save-model checkpoint in ``out``; returns the quantized model."""
    loaded, spec, collected = load_model(str(source)), get_method(method), StateCollector()
    prune_layers(loaded.model, _windows(), spec, _compression(method), spec.make_config(), cfg=CFG,
                 emit=lambda event: None, on_mask=collected.mask, on_quant=collected.quant)
    save_run_checkpoint(loaded.model, loaded.codec, out, collected)
    return loaded.model


@pytest.mark.parametrize(("source", "method"), [("llama-fp32", "rtn"), ("llama-fp32", "gptq"),
                                                ("llama-fp32", "awp"), ("qwen2-bf16", "rtn")])
def test_streamed_checkpoint_is_the_in_memory_one(sources: dict[str, Path], tmp_path: Path, source: str,
                                                  method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _in_memory(sources[source], method, tmp_path / "memory")
    spec, quants, held = get_method(method), [], []
    pack = LayerPacker.pack

    def counting(self: LayerPacker, index: int, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        assert not self.collector.states and not self.collector.keeps  # packed as they came, masks dropped
        held.append(sorted({key[0] for key in self.collector.packed}))
        return pack(self, index, tensors)

    monkeypatch.setattr(LayerPacker, "pack", counting)
    prune_streaming(open_streamed(sources[source]), tmp_path / "streamed", _windows(), spec, _compression(method),
                    spec.make_config(), cfg=CFG, emit=lambda event: None,
                    on_quant=lambda layer, name, state: quants.append((layer, name)))
    assert len(quants) == 14  # every linear of both layers reached the caller's sink too
    assert held == [[0], [1]]  # when a layer is packed, only its own states are held (host memory: one layer)
    memory, streamed = _tensors(tmp_path / "memory"), _tensors(tmp_path / "streamed")
    assert streamed.keys() == memory.keys() and any(key.endswith("weight_packed") for key in memory)
    for key, value in memory.items():
        assert streamed[key].dtype == value.dtype and torch.equal(streamed[key], value), key  # the same codes
    assert _quant_config(tmp_path / "streamed") == _quant_config(tmp_path / "memory")
    assert not (tmp_path / "streamed.partial").exists()

    reloaded = load_model(str(tmp_path / "streamed")).model  # dequantized by from_pretrained
    tokens = _windows(2, seed=3)
    with torch.no_grad():
        expected, got = model(tokens).logits.float(), reloaded(tokens).logits.float()
    assert torch.allclose(got, expected, rtol=1e-3, atol=1e-3 if "fp32" in source else 5e-2)
    windows = _windows(5, seed=4)
    assert streamed_perplexity(open_streamed(tmp_path / "streamed"), windows, CPU, batch_size=2) == \
        pytest.approx(perplexity(reloaded, windows, CPU, batch_size=2), rel=1e-5)


def test_awq_is_refused_before_anything_is_written(sources: dict[str, Path], tmp_path: Path) -> None:
    spec = get_method("awq")
    with pytest.raises(ToolkitError, match="cannot be saved as a quantized checkpoint"):
        prune_streaming(open_streamed(sources["llama-fp32"]), tmp_path / "out", _windows(), spec,
                        Compression(None, INT4), spec.make_config(), cfg=CFG, emit=lambda event: None)
    assert list(tmp_path.iterdir()) == []


def test_streamed_eval_of_a_quantized_folder_missing_a_shard(sources: dict[str, Path], tmp_path: Path) -> None:
    spec = get_method("rtn")
    out = tmp_path / "out"
    prune_streaming(open_streamed(sources["llama-fp32"]), out, _windows(), spec, Compression(None, INT4),
                    spec.make_config(), cfg=CFG, emit=lambda event: None)
    (out / layer_shard(1)).unlink()
    with pytest.raises(ToolkitError, match=f"shard {layer_shard(1)} .* does not exist") as caught:
        open_streamed(out)
    assert "\n" not in str(caught.value)
    assert layer_shard(1) in (out / SAFETENSORS_INDEX).read_text()


def _run_config(source: Path, out: Path, *, stream: bool = False, save_model: bool = False) -> RunConfig:
    return RunConfig(model=str(source), method="rtn", sparsity=None, quant=INT4, nsamples=4, seqlen=32,
                     eval_data="wiki", eval_seqlen=32, eval_windows=4, device="cpu", calib="wiki",
                     out_dir=str(out), stream=stream, save_model=save_model)


def test_a_streamed_quantized_run_records_and_reloads(sources: dict[str, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from toolkit.run import pipeline

    monkeypatch.setattr(pipeline, "cached_dense_ppl", lambda key: None)
    memory = prune_model(_run_config(sources["llama-fp32"], tmp_path / "runs", save_model=True))
    streamed = prune_model(_run_config(sources["llama-fp32"], tmp_path / "runs", stream=True))
    assert streamed["ppl"]["wiki"] == pytest.approx(memory["ppl"]["wiki"], rel=1e-5)
    assert streamed["checkpoint"]["format"] == "pack-quantized"
    assert streamed["bought"]["stored_as"] == memory["bought"]["stored_as"] == "pack-quantized"
    for key in ("quantized_linears", "quantized_weights", "quantized_bytes", "bits_per_weight", "dense_bf16_bytes"):
        assert streamed["checkpoint"][key] == memory["checkpoint"][key], key
    folder = Path(streamed["run_dir"]) / "model"
    reloaded = load_model(str(folder)).model
    windows = pipeline.prepare(_run_config(sources["llama-fp32"], tmp_path / "check")).test
    assert windows is not None
    assert perplexity(reloaded, windows, CPU) == pytest.approx(streamed["ppl"]["wiki"], rel=1e-5)


def test_a_failure_mid_layer_leaves_no_checkpoint(sources: dict[str, Path], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from toolkit.run import pipeline

    rtn = get_method("rtn")

    def fn(W, stats, target, cfg, ctx):
        if ctx.layer == 1:
            raise RuntimeError("solve failed on layer 1")
        return rtn.fn(W, stats, target, cfg, ctx)

    monkeypatch.setattr(pipeline, "get_method", lambda name: dataclasses.replace(rtn, fn=fn))
    with pytest.raises((RuntimeError, ToolkitError), match="solve failed on layer 1"):
        prune_model(_run_config(sources["llama-fp32"], tmp_path / "runs", stream=True))
    (run,) = [path for path in (tmp_path / "runs").iterdir() if path.is_dir()]
    assert not (run / "model").exists() and not (run / "model.partial").exists()
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed" and "solve failed on layer 1" in status["error"]


def test_the_run_refuses_awq_with_stream_before_any_work(sources: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ToolkitError, match="--stream writes the checkpoint as it goes, and awq results cannot"):
        RunConfig(model=str(sources["llama-fp32"]), method="awq", sparsity=None, quant=INT4, stream=True,
                  out_dir=str(tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()
