"""Every model PruneLab saves loads back: chains of runs, each saved with --save-model and reloaded.

The first run shrinks a tiny model with Numerical Pruning (per-layer counts, or uniform ones with
``uniform=true``); the next runs prune or quantize the saved model and save it again. Each saved
model must reload through ``toolkit.load_model`` with the in-memory model's logits and perplexity;
a standard folder (uniform shapes) must load in plain transformers with the same logits, and a
per-layer one must make plain ``from_pretrained`` fail with a message naming ``toolkit.load_model``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.helpers.block_models import logits
from toolkit.api import RunConfig, evaluate_model, prune_model
from toolkit.errors import ToolkitError
from toolkit.models.load import LoadedModel, load_model
from toolkit.models.sources import is_shrunk
from toolkit.run import pipeline

pytest.importorskip("compressed_tensors")

FAST: dict[str, Any] = {"nsamples": 4, "seqlen": 32, "eval_seqlen": 32, "eval_windows": 2}
FAST_AWP = {"ramp_iters": 2, "hold_iters": 2, "joint_iters": 4}
HINT = r"toolkit\.load_model"


def run_saved(out: Path, model: str, method: str, **config: Any) -> tuple[dict[str, Any], nn.Module]:
    """Run ``method`` on ``model`` with --save-model; returns the result and the in-memory compressed model."""
    loaded: list[LoadedModel] = []

    def keep(*args: Any, **kwargs: Any) -> LoadedModel:
        loaded.append(load_model(*args, **kwargs))
        return loaded[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "load_model", keep)
        result = prune_model(RunConfig(model=model, method=method, out_dir=str(out), save_model=True,
                                       **FAST | config))
    return result, loaded[-1].model


def saved(result: dict[str, Any]) -> Path:
    """The model folder a run saved."""
    folder = Path(result["run_dir"]) / "model"
    assert folder.is_dir() and not list(folder.parent.glob("*.partial")), "the run left no model or a partial one"
    return folder


def assert_reloads(result: dict[str, Any], model: nn.Module, atol: float = 1e-5) -> LoadedModel:
    """The saved model reloads through toolkit.load_model with the in-memory logits and perplexity."""
    folder = saved(result)
    reloaded = load_model(str(folder))
    torch.testing.assert_close(logits(reloaded.model), logits(model), atol=atol, rtol=0)
    ppl, _ = evaluate_model(reloaded, data="wiki", seq_len=FAST["eval_seqlen"], max_windows=FAST["eval_windows"],
                            device="cpu")
    assert ppl == pytest.approx(result["ppl"]["wiki"], rel=1e-4)
    return reloaded


def assert_plain_transformers(folder: Path, model: nn.Module, atol: float = 1e-5) -> None:
    """A standard folder: plain from_pretrained loads it with the in-memory logits."""
    from transformers import AutoModelForCausalLM

    assert not is_shrunk(folder)
    plain = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    torch.testing.assert_close(logits(plain), logits(model), atol=atol, rtol=0)


def assert_refused_by_plain_transformers(folder: Path) -> None:
    """A per-layer folder: plain from_pretrained fails (also told to ignore mismatched sizes), naming the loader."""
    from transformers import AutoModelForCausalLM

    assert is_shrunk(folder)
    for options in ({}, {"ignore_mismatched_sizes": True}):
        with pytest.raises(Exception, match=HINT):  # transformers' own error: a ValueError naming the model type
            AutoModelForCausalLM.from_pretrained(folder, **options)


def assert_loads_back(result: dict[str, Any], model: nn.Module, per_layer: bool, atol: float = 1e-5) -> None:
    """Reload through PruneLab, then the plain-transformers check the folder's format calls for."""
    assert_reloads(result, model, atol)
    if per_layer:
        assert_refused_by_plain_transformers(saved(result))
    else:
        assert_plain_transformers(saved(result), model, atol)


@pytest.fixture(scope="module", params=["per-layer", "uniform"])
def shrunk(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, bool]:
    """A tiny Llama shrunk by Numerical Pruning and saved: (its model folder, whether it is per-layer)."""
    per_layer = request.param == "per-layer"
    out = tmp_path_factory.mktemp(f"structured-{request.param}")
    options = {} if per_layer else {"uniform": True}
    result, model = run_saved(out, "tiny-llama", "numerical", sparsity="structured:30%", unit="heads+channels",
                              options=options)
    assert_loads_back(result, model, per_layer)
    return str(saved(result)), per_layer


def test_structured_then_wanda(shrunk: tuple[str, bool], tmp_path: Path) -> None:
    folder, per_layer = shrunk
    result, model = run_saved(tmp_path, folder, "wanda", sparsity="50%")
    assert_loads_back(result, model, per_layer)
    assert result["checkpoint"]["per_layer"] is per_layer


def test_structured_then_rtn_int4(shrunk: tuple[str, bool], tmp_path: Path) -> None:
    folder, per_layer = shrunk
    result, model = run_saved(tmp_path, folder, "rtn", sparsity=None, quant="int4:g0")
    assert result["checkpoint"]["format"] == "pack-quantized" and result["checkpoint"]["per_layer"] is per_layer
    config = json.loads((saved(result) / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"
    assert_loads_back(result, model, per_layer)


@pytest.mark.slow
def test_structured_then_awp_int4(shrunk: tuple[str, bool], tmp_path: Path) -> None:
    folder, per_layer = shrunk
    result, model = run_saved(tmp_path, folder, "awp", sparsity=None, quant="int4:g0", options=FAST_AWP)
    assert_loads_back(result, model, per_layer)


def test_structured_then_awp_joint(shrunk: tuple[str, bool], tmp_path: Path) -> None:
    folder, per_layer = shrunk
    result, model = run_saved(tmp_path, folder, "awp", sparsity="50%", quant="int4:g0", options=FAST_AWP)
    assert "sparse_note" in result["checkpoint"]
    assert_loads_back(result, model, per_layer)


@pytest.mark.slow
def test_structured_then_wanda_then_rtn(shrunk: tuple[str, bool], tmp_path: Path) -> None:
    """A prune-then-quantize pipeline as two saved runs (the two-stage methods' AWQ cannot be saved)."""
    folder, per_layer = shrunk
    pruned, _ = run_saved(tmp_path / "wanda", folder, "wanda", sparsity="50%")
    result, model = run_saved(tmp_path / "rtn", str(saved(pruned)), "rtn", sparsity=None, quant="int8:g0")
    assert_loads_back(result, model, per_layer)


def test_a_run_folder_is_a_model_source(shrunk: tuple[str, bool], tmp_path: Path) -> None:
    folder, per_layer = shrunk
    result, model = run_saved(tmp_path, str(Path(folder).parent), "magnitude", sparsity="30%")
    assert_loads_back(result, model, per_layer)


@pytest.mark.slow
def test_awp_joint_on_a_dense_model(tmp_path: Path) -> None:
    result, model = run_saved(tmp_path, "tiny-qwen2", "awp", sparsity="50%", quant="int4:g32", options=FAST_AWP)
    assert_loads_back(result, model, per_layer=False)


@pytest.mark.slow
def test_quantized_then_wanda_saves_a_standard_float_checkpoint(tmp_path: Path) -> None:
    """A model loaded from a pack-quantized checkpoint (dequantized) is pruned and saved as plain floats."""
    quantized, _ = run_saved(tmp_path / "rtn", "tiny-llama", "rtn", sparsity=None, quant="int4:g32")
    result, model = run_saved(tmp_path / "wanda", str(saved(quantized)), "wanda", sparsity="50%")
    assert result["checkpoint"]["format"] == "dense"
    assert "quantization_config" not in json.loads((saved(result) / "config.json").read_text())
    assert_loads_back(result, model, per_layer=False)


def test_a_group_the_per_layer_widths_cannot_hold_is_refused_before_any_work(shrunk: tuple[str, bool],
                                                                             tmp_path: Path) -> None:
    folder, per_layer = shrunk
    if not per_layer:
        pytest.skip("the uniform widths hold whole groups of 32")
    with pytest.raises(ToolkitError, match="not a multiple of the group size 32") as caught:
        prune_model(RunConfig(model=folder, method="rtn", sparsity=None, quant="int4:g32", out_dir=str(tmp_path),
                              save_model=True, **FAST))
    assert "\n" not in str(caught.value) and not list(tmp_path.iterdir())


def test_two_stage_awq_with_save_model_is_refused_on_a_shrunk_model(shrunk: tuple[str, bool]) -> None:
    folder, _ = shrunk
    with pytest.raises(ToolkitError, match="wanda\\+awq results cannot be saved"):
        RunConfig(model=folder, method="wanda+awq", sparsity="50%", quant="int4:g0", save_model=True)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["flap", "wanda-sp"])
def test_other_block_methods_then_gptq(method: str, tmp_path: Path) -> None:
    first, first_model = run_saved(tmp_path / method, "tiny-qwen2", method, sparsity="structured:30%",
                                   unit="heads+channels")
    per_layer = is_shrunk(saved(first))
    assert_loads_back(first, first_model, per_layer)
    result, model = run_saved(tmp_path / "gptq", str(saved(first)), "gptq", sparsity=None, quant="int4:g0")
    assert_loads_back(result, model, per_layer)
