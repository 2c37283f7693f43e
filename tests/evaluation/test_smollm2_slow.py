"""The embedded model end to end (slow: loads smollm2-135m; `make test` and CI run it)."""

from __future__ import annotations

import pytest

from toolkit.api import RunConfig, prune_model


@pytest.mark.slow
def test_wanda_on_embedded_model(tmp_path) -> None:
    config = RunConfig(model="smollm2-135m", method="wanda", sparsity="2:4", nsamples=2, seqlen=128, eval_seqlen=256,
                       eval_windows=4, eval_dense=True, out_dir=str(tmp_path))
    result = prune_model(config)
    # ≥ 2:4's 50 %: a few weights of the Q4_1 grid are exactly zero already
    assert 0.5 <= result["achieved_sparsity"] < 0.5 + 1e-4
    assert len(result["layers"]) == 30 * 7
    dense, pruned = result["dense_ppl"]["wiki"], result["ppl"]["wiki"]
    assert 5 < dense < 40, dense  # SmolLM2-135M on Wikipedia lead sections
    assert dense < pruned < 50 * dense
    assert result["protocol"]["model_label"].startswith("SmolLM2-135M")
