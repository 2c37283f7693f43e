"""AWQ with ``scale=shared`` saves: its scales folded, the checkpoint reloads at the perplexity the run reported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from toolkit.cli.main import main
from toolkit.errors import ToolkitError
from toolkit.models.load import load_model
from toolkit.run.config import RunConfig
from toolkit.store.runs import open_run


def _run(out: Path, family: str, *extra: str) -> Path:
    before = set(out.iterdir()) if out.exists() else set()
    assert main(["prune", "--model", f"tiny-{family}", "--method", "awq", "--quant", "int4:g32", "--protocol",
                 "quick", "--out", str(out), *extra]) == 0
    (run,) = set(out.iterdir()) - before
    return run


@pytest.mark.parametrize("family", ["llama", "gemma3", "qwen2"])
def test_shared_scale_run_saves_and_reloads_at_its_perplexity(family: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path, family, "--set", "scale=shared", "--save-model")
    result = json.loads((run / "result.json").read_text())
    reported = result["ppl"]["wiki"]
    assert result["accounting"] and (run / "model" / "config.json").is_file()
    capsys.readouterr()
    assert main(["eval", "--model", str(run), "--seqlen", "128", "--windows", "16"]) == 0
    reloaded = float(capsys.readouterr().out.split("tokens): ")[-1].split()[0])
    assert reloaded == pytest.approx(reported, rel=1e-4)
    # the stored states are the folded ones: they dequantize to the weights the saved model holds
    record = open_run(run)
    saved: Any = load_model(str(run / "model")).model
    dense: Any = load_model(f"tiny-{family}").model
    for layer, name in record.quant_names():
        stored = record.load_quant(layer, name)
        width = stored.group_size
        expand = np.repeat(np.arange(stored.scales.shape[1]), width)[: stored.codes.shape[1]]
        weight = (stored.codes.astype(np.float32) - stored.zeros[:, expand]) * stored.scales[:, expand]
        module = saved.get_submodule(f"model.layers.{layer}.{name}")
        assert np.allclose(weight, module.weight.detach().float().numpy(), atol=1e-5), (layer, name)
    names = ("input_layernorm", "pre_feedforward_layernorm", "post_attention_layernorm")
    moved = [(i, n) for i, (a, b) in enumerate(zip(saved.model.layers, dense.model.layers, strict=True))
             for n in names if hasattr(a, n) and not torch.allclose(getattr(a, n).weight, getattr(b, n).weight)]
    assert moved  # the scales went into the norms


def test_own_scales_refuse_to_save_and_say_how() -> None:
    with pytest.raises(ToolkitError, match="add --set scale=shared"):
        RunConfig(model="tiny-llama", method="awq", sparsity=None, quant="int4", save_model=True)
    RunConfig(model="tiny-llama", method="awq", sparsity=None, quant="int4", save_model=True,
              options={"scale": "shared"})


def test_own_scales_give_the_per_linear_results(tmp_path: Path) -> None:
    """The group solve with scale=own is the per-linear AWQ it was: q, k and v each get their own scale."""
    run = _run(tmp_path, "llama")
    events = [e for e in open_run(run).events() if type(e).__name__ == "SublayerPruned"]
    alphas = {e.name: e.info.get("alpha") for e in events if e.layer == 0}
    assert set(alphas) >= {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}
    assert not any(e.info.get("scale") for e in events)
