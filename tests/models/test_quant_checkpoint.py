"""Quantizing runs save a compressed-tensors checkpoint that reloads to the in-memory perplexity."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from toolkit.api import RunConfig, evaluate_model
from toolkit.cli.main import main
from toolkit.errors import ToolkitError
from toolkit.models.quant_checkpoint import SPARSE_NOTE

pytest.importorskip("compressed_tensors")

TINY = ["--model", "tiny-llama", "--nsamples", "4", "--seqlen", "64", "--eval-seqlen", "64", "--eval-windows", "3"]
FAST_AWP = ["--set", "ramp_iters=2", "--set", "hold_iters=2", "--set", "joint_iters=4"]


def run_cli(tmp_path: Path, argv: list[str]) -> dict:
    assert main(["prune", *TINY, "--out", str(tmp_path / "runs"), "--json", str(tmp_path / "r.json"), *argv]) == 0
    return json.loads((tmp_path / "r.json").read_text())


@pytest.mark.parametrize("argv", [
    ["--method", "rtn", "--quant", "int4:g32"],
    ["--method", "gptq", "--quant", "int3:g32", "--set", "block_size=32"],
    ["--method", "awp", "--quant", "int4"],  # g128 is wider than tiny-llama's rows: one group per row
    ["--method", "awp", "--sparsity", "50%", "--quant", "int4:g32", *FAST_AWP],
], ids=["rtn", "gptq", "awp-quantize", "awp-joint"])
def test_the_checkpoint_reloads_to_the_in_memory_perplexity(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                            argv: list[str]) -> None:
    result = run_cli(tmp_path, ["--save-model", *argv])
    checkpoint = result["checkpoint"]
    folder = Path(result["run_dir"]) / "model"
    assert checkpoint["format"] == "pack-quantized" and checkpoint["folder"] == str(folder)
    assert checkpoint["quantized_linears"] == 14 and result["accounting"]["checkpoint_bytes"] == checkpoint["bytes"]
    bits = json.loads((folder / "config.json").read_text())["quantization_config"]["config_groups"]
    assert {group["weights"]["num_bits"] for group in bits.values()} == {result["compression"]["quant"]["bits"]}
    # codes + float32 scales + packed zero points: above the code bits, below a float16 weight
    assert result["compression"]["quant"]["bits"] < checkpoint["bits_per_weight"] < 16
    assert checkpoint["dense_bf16_bytes"] > 0 and checkpoint["size_vs_dense_bf16"] < 1
    printed = capsys.readouterr().out
    assert "checkpoint pack-quantized" in printed and "bits per weight on disk (codes packed in int32 words" in printed
    sparse = result["compression"]["sparsity"] is not None
    assert ("sparse_note" in checkpoint) == sparse and (SPARSE_NOTE in printed) == sparse
    reloaded, protocol = evaluate_model(str(folder), data="wiki", seq_len=64, max_windows=3, device="cpu")
    assert protocol["windows"] == 3 and "pack-quantized" in protocol["model_label"]
    assert reloaded == pytest.approx(result["ppl"]["wiki"], abs=1e-3)
    from transformers import AutoModelForCausalLM  # the plain loader, as a user would call it

    model = AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        assert torch.isfinite(model(torch.arange(16).unsqueeze(0)).logits).all()


def test_save_model_with_awq_is_refused_before_loading() -> None:
    for method in ("awq", "wanda+awq", "awq+wanda"):
        sparsity = None if method == "awq" else "50%"
        with pytest.raises(ToolkitError, match=re.escape(f"{method} results cannot be saved")) as caught:
            RunConfig(model="no-such-model", method=method, sparsity=sparsity, quant="int4", save_model=True)
        assert "\n" not in str(caught.value)


def test_out_without_save_model_skips_the_awq_checkpoint_and_says_so(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    result = run_cli(tmp_path, ["--method", "awq", "--quant", "int4:g32", "--set", "n_grid=2", "--set", "clip=off"])
    assert result["checkpoint"] is None and not (Path(result["run_dir"]) / "model").exists()
    assert "model not saved: awq states need their input scale folded" in capsys.readouterr().out
