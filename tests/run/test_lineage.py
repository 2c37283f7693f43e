"""Where a model's zeros come from: its lineage, not a zero-fraction threshold (toolkit/models/lineage.py).

A tiny-llama checkpoint with 6 % of its weights rounded to exactly 0 stands for a dequantized Q4_K_M
GGUF (Gemma-3-270M's has 6.0 %): with the GGUF lineage a quantizer sees no pattern to keep and GPTQ
holds nothing; with no lineage the same zeros are judged by the 1 % threshold, as before. A pruning
run's saved model says it is sparse, and a quantizer on it keeps its pattern.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from toolkit.api import RunConfig, prune_model
from toolkit.models.layers import decoder_layers, get_weight, layer_linears
from toolkit.models.lineage import LINEAGE_FILE, UNKNOWN, quantized_source, read_lineage, write_lineage
from toolkit.models.load import load_model
from toolkit.models.shrunk import save_shrunk

FAST = {"nsamples": 2, "seqlen": 32, "eval_data": None}


def _rounded(folder: Path, lineage: bool) -> Path:
    """tiny-llama with 6 % of every decoder linear's weights exactly 0, saved; with the GGUF lineage or none."""
    loaded = load_model("tiny-llama")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for layer in decoder_layers(loaded.model):
            for module in layer_linears(layer).values():
                weight = get_weight(module)
                weight[torch.rand(weight.shape, generator=generator) < 0.06] = 0.0
    save_shrunk(loaded.model, loaded.codec, folder)
    if lineage:
        write_lineage(folder, quantized_source("Q4_K_M"))
    return folder


def _quantize(model: Path, out: Path, method: str) -> dict:
    return prune_model(RunConfig(model=str(model), method=method, sparsity=None, quant="int4:g32",
                                 out_dir=str(out), save_model=True, **FAST))


@pytest.mark.parametrize("method", ["rtn", "gptq"])
def test_a_quantized_sources_zeros_are_not_a_pattern(tmp_path: Path, method: str) -> None:
    source = _rounded(tmp_path / "gguf-like", lineage=True)
    assert read_lineage(source).sparse is False
    result = _quantize(source, tmp_path / "runs", method)
    assert result["zero_pattern"] is None  # no "sparse linears", no "pattern NOT kept"
    if method == "gptq":
        assert result["options"]["keep_zeros"] == "off"  # auto, resolved by the lineage: nothing held at 0
    saved = read_lineage(Path(result["run_dir"]) / "model")
    assert saved.origin == "run" and saved.sparse is False and saved.parent == quantized_source("Q4_K_M").to_dict()


def test_without_lineage_the_same_zeros_are_judged_by_the_threshold(tmp_path: Path) -> None:
    source = _rounded(tmp_path / "unknown", lineage=False)
    assert read_lineage(source) == UNKNOWN
    result = _quantize(source, tmp_path / "runs", "gptq")
    assert result["options"]["keep_zeros"] == "auto"
    assert result["zero_pattern"] is not None and result["zero_pattern"]["linears"] == 14


def test_a_pruned_run_says_it_is_sparse_and_its_quantizer_holds_the_zeros(tmp_path: Path) -> None:
    pruned = prune_model(RunConfig(model="tiny-llama", method="wanda", sparsity="2:4", out_dir=str(tmp_path),
                                   save_model=True, **FAST))
    folder = Path(pruned["run_dir"]) / "model"
    lineage = read_lineage(folder)
    assert (folder / LINEAGE_FILE).is_file() and lineage.sparse is True
    assert lineage.detail.startswith("wanda 2:4 (run ") and lineage.parent is not None
    assert lineage.parent["origin"] == "built" and lineage.parent["sparse"] is False
    result = _quantize(folder, tmp_path / "quant", "gptq")
    assert result["options"]["keep_zeros"] == "on" and result["zero_pattern"]["kept"]
    assert read_lineage(Path(result["run_dir"]) / "model").sparse is True  # still a sparse model


def test_an_unreadable_lineage_is_unknown(tmp_path: Path) -> None:
    (tmp_path / LINEAGE_FILE).write_text("{not json")
    assert read_lineage(tmp_path) == UNKNOWN
    (tmp_path / LINEAGE_FILE).write_text('{"origin": "run", "sparse": "yes"}')
    assert read_lineage(tmp_path).sparse is None
