"""A quantizer on a pruned model: its zero pattern kept, or how far it broke (toolkit/run/zero_pattern.py).

A 2:4 tiny-llama checkpoint is quantized at int4 by GPTQ with and without keep_zeros and by RTN;
the result's ``zero_pattern`` is counted on the written weights and the summary prints it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from toolkit.api import RunConfig, prune_model
from toolkit.cli.main import main
from toolkit.models.layers import decoder_layers, get_weight, layer_linears
from toolkit.models.load import load_model
from toolkit.run.zero_pattern import input_zeros, zero_pattern

FAST = {"nsamples": 2, "seqlen": 32, "eval_data": None}


@pytest.fixture(scope="module")
def two_four(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny-llama checkpoint pruned 2:4 by Wanda."""
    root = tmp_path_factory.mktemp("two-four")
    result = prune_model(RunConfig(model="tiny-llama", method="wanda", sparsity="2:4", out_dir=str(root),
                                   save_model=True, **FAST))
    return Path(result["run_dir"]) / "model"


def _quantize(model: Path, tmp_path: Path, method: str, **options: str) -> dict:
    return prune_model(RunConfig(model=str(model), method=method, sparsity=None, quant="int4:g32", options=options,
                                 out_dir=str(tmp_path), save_model=True, **FAST))


def _lost_groups(folder: Path) -> tuple[int, int]:
    """(groups of four with more than two nonzeros, groups) over the decoder linears of a saved checkpoint."""
    model = load_model(str(folder)).model
    lost = total = 0
    for layer in decoder_layers(model):
        for module in layer_linears(layer).values():
            counts = (get_weight(module) != 0).reshape(get_weight(module).shape[0], -1, 4).sum(dim=2)
            lost, total = lost + int((counts > 2).sum()), total + counts.numel()
    return lost, total


def test_plain_gptq_breaks_the_two_four_pattern_and_says_how_far(two_four: Path, tmp_path: Path) -> None:
    result = _quantize(two_four, tmp_path, "gptq", keep_zeros="off")
    record = result["zero_pattern"]
    lost, total = _lost_groups(Path(result["run_dir"]) / "model")  # counted again on the saved checkpoint
    assert record["pattern"] == "2:4" and record["groups"] == total == 73_728 // 4
    assert record["groups_lost"] == lost > 0 and not record["kept"]
    assert record["zeros_before"] == 73_728 // 2 > record["zeros_kept"]
    assert record["message"].startswith(f"zero pattern of the input NOT kept: {lost:,} of {total:,} groups of four "
                                        "lost the 2:4 pattern")
    assert record["message"].endswith("to keep it: --set keep_zeros=on holds them")


@pytest.mark.parametrize(("method", "options"), [("gptq", {}), ("rtn", {})])
def test_gptq_by_default_and_rtn_keep_the_pattern(two_four: Path, tmp_path: Path, method: str,
                                                  options: dict) -> None:
    result = _quantize(two_four, tmp_path, method, **options)
    record = result["zero_pattern"]
    assert _lost_groups(Path(result["run_dir"]) / "model")[0] == 0
    assert record["kept"] and record["groups_lost"] == 0 and record["zeros_kept"] == record["zeros_before"]
    assert record["message"].startswith("zero pattern of the input kept (2:4 in all 18,432 groups of four)")
    if method == "gptq":  # its keep-masks are the input's nonzeros, so the run's sparsity is the input's
        assert result["achieved_sparsity"] == pytest.approx(0.5)


def test_the_summary_prints_the_pattern_line(two_four: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["prune", "--model", str(two_four), "--method", "gptq", "--quant", "int4:g32", "--set",
                 "keep_zeros=off", "--nsamples", "2", "--seqlen", "32", "--eval", "none", "--out", str(tmp_path)]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("zero pattern")]
    assert len(lines) == 1 and "groups of four lost the 2:4 pattern" in lines[0]


def test_a_dense_input_has_no_pattern_to_keep(tmp_path: Path) -> None:
    model = load_model("tiny-llama").model
    assert input_zeros(model) is None and zero_pattern(model, None, "gptq") is None
    result = _quantize(Path("tiny-llama"), tmp_path, "rtn")
    assert result["zero_pattern"] is None


def test_unstructured_zeros_are_reported_as_such() -> None:
    model = load_model("tiny-llama").model
    weight = get_weight(layer_linears(decoder_layers(model)[0])["mlp.down_proj"])
    with torch.no_grad():
        weight[:, :10] = 0.0  # ten whole input columns of 128: no n:m pattern
        before = input_zeros(model)
        assert before is not None and before.pattern is None and list(before.packed) == [(0, "mlp.down_proj")]
        weight[0, 0] = 1.0
    record = zero_pattern(model, before, "awq")
    assert record is not None and record["pattern"] == "unstructured" and record["zeros_kept"] == 640 - 1
    assert "the unstructured zeros were filled; 1 of 640 zeros are nonzero after awq" in record["message"]
