"""Streamed perplexity (layers loaded one at a time from the shards) equals the in-memory perplexity."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.models.test_stream import save_tiny
from toolkit.engine.stream_eval import streamed_perplexity
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.evaluation.perplexity import perplexity
from toolkit.models.load import load_model
from toolkit.models.save import save_checkpoint
from toolkit.models.stream import open_streamed

CPU = torch.device("cpu")


def _windows(count: int = 5) -> torch.Tensor:
    return torch.randint(0, 256, (count, 24), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize(("kind", "dtype"), [("llama", "float32"), ("llama", "bfloat16"), ("qwen2", "bfloat16"),
                                             ("opt", "float32"), ("gpt2", "float32")])
def test_streamed_perplexity_equals_the_in_memory_one(tmp_path: Path, kind: str, dtype: str) -> None:
    folder = save_tiny(tmp_path / kind, kind, dtype, shard_size="50KB")
    windows = _windows()
    expected = perplexity(load_model(str(folder)).model, windows, CPU, batch_size=2)
    streamed = open_streamed(folder)
    got = streamed_perplexity(streamed, windows, CPU, batch_size=2)
    assert got == pytest.approx(expected, rel=1e-6)  # measured: equal to the last bit
    assert all(p.device.type == "meta" for p in streamed.layers.parameters())  # every layer released


def test_a_pruned_layer_changes_the_streamed_perplexity_as_in_memory(tmp_path: Path) -> None:
    folder = save_tiny(tmp_path / "llama", "llama", "float32")
    loaded = load_model(str(folder))
    model = loaded.model
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "layers.1." in name and name.endswith("proj.weight"):
                param.mul_(torch.rand(param.shape, generator=torch.Generator().manual_seed(2)) > 0.5)
    save_checkpoint(model, loaded.codec, tmp_path / "pruned")
    windows = _windows()
    dense = streamed_perplexity(open_streamed(folder), windows, CPU, batch_size=2)
    pruned = perplexity(model, windows, CPU, batch_size=2)
    assert streamed_perplexity(open_streamed(tmp_path / "pruned"), windows, CPU, batch_size=2) == \
        pytest.approx(pruned, rel=1e-4)
    assert abs(pruned - dense) > 1e-3 * dense


def test_cancel_releases_the_layer(tmp_path: Path) -> None:
    folder = save_tiny(tmp_path / "llama", "llama", "float32")
    streamed = open_streamed(folder)
    calls = iter([False, True])
    with pytest.raises(RunCancelled):
        streamed_perplexity(streamed, _windows(), CPU, cancelled=lambda: next(calls))
    assert all(p.device.type == "meta" for p in streamed.layers.parameters())


def test_a_streamed_run_evaluates_as_the_in_memory_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from toolkit.api import RunConfig, prune_model
    from toolkit.run import pipeline

    monkeypatch.setattr(pipeline, "cached_dense_ppl", lambda key: None)  # both runs measure the dense model

    folder = save_tiny(tmp_path / "llama", "llama", "float32", shard_size="50KB")
    common = {"model": str(folder), "method": "wanda", "sparsity": "0.5", "nsamples": 4, "seqlen": 32,
              "eval_data": "wiki", "eval_seqlen": 32, "eval_windows": 6, "eval_dense": True, "device": "cpu",
              "calib": "wiki", "out_dir": str(tmp_path / "runs")}
    memory = prune_model(RunConfig(**common))
    streamed = prune_model(RunConfig(**common, stream=True))
    assert streamed["ppl"]["wiki"] == pytest.approx(memory["ppl"]["wiki"], rel=1e-5)
    assert streamed["dense_ppl"]["wiki"] == pytest.approx(memory["dense_ppl"]["wiki"], rel=1e-5)
    assert not streamed["dense_ppl_cached"]
    assert streamed["ppl"]["wiki"] != pytest.approx(streamed["dense_ppl"]["wiki"], rel=1e-4)


def test_a_streamed_evaluation_of_a_folder_missing_a_shard_is_refused(tmp_path: Path) -> None:
    folder = save_tiny(tmp_path / "llama", "llama", "float32", shard_size="50KB")
    shard = sorted(folder.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(ToolkitError, match=shard.name):
        streamed_perplexity(open_streamed(folder), _windows(), CPU)


def test_a_streamed_run_refuses_generations_before_any_work(tmp_path: Path) -> None:
    from toolkit.api import RunConfig

    folder = save_tiny(tmp_path / "llama", "llama", "float32")
    with pytest.raises(ToolkitError, match="generations need the whole model"):
        RunConfig(model=str(folder), method="wanda", stream=True, generate=True, out_dir=str(tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()
