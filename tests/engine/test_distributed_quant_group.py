"""A ``--distributed`` run given ``int4`` without a group: every rank quantizes with the group rank 0 fitted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.engine.test_distributed import _spawn
from tests.helpers.dist_ranks import run_rank
from tests.run.test_quant_group_run import wide_llama
from toolkit.store.runs import open_run


@pytest.mark.slow  # spawns two Python processes (about 40 s on two shared cores)
def test_the_other_rank_uses_the_fitted_group(tmp_path: Path) -> None:
    config = {"model": wide_llama(tmp_path / "llama"), "method": "rtn", "sparsity": None, "quant": "int4",
              "nsamples": 2, "seqlen": 32, "eval_data": None, "propagate": "dense", "threads": 1,
              "distributed": True, "out_dir": str(tmp_path / "runs")}
    rank0, rank1 = _spawn(run_rank, [config, config], tmp_path)
    assert rank0.get("code") == 0 and rank1.get("code") == 0, (rank0, rank1)
    record = open_run(rank0["run_dir"])
    states = {key: record.load_quant(*key) for key in record.quant_names()}
    assert {layer for layer, _ in states} == {0, 1}  # layer 1 was solved on rank 1
    assert {state.group_size for state in states.values()} == {64}
    wide = states[(1, "self_attn.q_proj")]  # 192 inputs: three groups of 64 on every row
    assert wide.scales.shape == (192, 3) and np.isfinite(wide.scales).all()
