"""The two-stage prune+quantize runs (wanda+awq, awq+wanda) with ``scale=shared`` save and reload at their figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from toolkit.cli.main import main
from toolkit.errors import ToolkitError
from toolkit.models.load import load_model
from toolkit.run.config import RunConfig

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _run(out: Path, *args: str) -> Path:
    before = set(out.iterdir()) if out.exists() else set()
    assert main(["prune", "--model", "tiny-llama", "--protocol", "quick", "--out", str(out), *args]) == 0
    (run,) = set(out.iterdir()) - before
    return run


@pytest.mark.parametrize(("method", "sparsity"), [("wanda+awq", "50%"), ("awq+wanda", "50%"), ("wanda+awq", "2:4")])
def test_shared_scale_two_stage_saves_sparse_and_reloads_at_its_perplexity(
        method: str, sparsity: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path, "--method", method, "--sparsity", sparsity, "--quant", "int4:g32", "--set", "scale=shared",
               "--save-model")
    result = json.loads((run / "result.json").read_text())
    capsys.readouterr()
    assert main(["eval", "--model", str(run), "--seqlen", "128", "--windows", "16"]) == 0
    reloaded = float(capsys.readouterr().out.split("tokens): ")[-1].split()[0])
    assert reloaded == pytest.approx(result["ppl"]["wiki"], rel=1e-4)
    saved: Any = load_model(str(run / "model")).model
    dense: Any = load_model("tiny-llama").model
    for layer in saved.model.layers:  # the folded scales did not fill the pruned weights back in
        for name in LINEARS:
            weight = layer.get_submodule(f"{'self_attn' if name[0] in 'qkvo' else 'mlp'}.{name}").weight
            assert float((weight == 0).float().mean()) >= 0.5 - 1e-6, name
    assert any(not torch.allclose(a.input_layernorm.weight, b.input_layernorm.weight)
               for a, b in zip(saved.model.layers, dense.model.layers, strict=True))  # the scales went into the norms


def test_shared_scale_changes_the_solution_and_own_scales_refuse_to_save(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ToolkitError, match="add --set scale=shared"):
        RunConfig(model="tiny-llama", method="wanda+awq", sparsity="50%", quant="int4", save_model=True)
    own = json.loads((_run(tmp_path, "--method", "awq+wanda", "--sparsity", "50%", "--quant", "int4:g32")
                      / "result.json").read_text())
    assert "--set scale=shared shares and folds one per group, and saves" in capsys.readouterr().out
    shared = json.loads((_run(tmp_path, "--method", "awq+wanda", "--sparsity", "50%", "--quant", "int4:g32",
                              "--set", "scale=shared") / "result.json").read_text())
    assert own["ppl"]["wiki"] != shared["ppl"]["wiki"]  # the group solve ran, not the per-linear one
