"""Channel permutation for n:m (toolkit/methods/permute.py, applied by toolkit/engine/solve.py).

The search by hand (spread, the assignment against brute force, the gain formula), the kept score it
improves, every n:m method solved in a permuted order and mapped back, the checks before work, and a
permuted 2:4 run on the tiny model whose checkpoint reloads with the same logits.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.stats import correlated_stats
from toolkit.engine.solve import reconstruction_errors
from toolkit.errors import ToolkitError
from toolkit.events import SublayerPruned
from toolkit.methods import METHODS, get_method
from toolkit.methods.base import LinearStats, MethodSpec, PruneResult, SolveContext
from toolkit.methods.masks import keep_nm, nm_violations
from toolkit.methods.permute import (
    _gains,
    assign_max,
    find_permutation,
    kept_score,
    permute_stats,
    permuted_solve,
    spread,
)
from toolkit.run.config import RunConfig
from toolkit.spec.compression import Compression, parse_compression
from toolkit.spec.targets import NM
from toolkit.store.runs import open_run

NM_METHODS = ("magnitude", "wanda", "ria", "sparsegpt", "thanos", "fista", "alps", "awp")
QUICK = {"alps": {"max_iters": 30}, "awp": {"prune_iters": 20},
         "thanos": {"alpha": 0.0}}  # α > 0 keeps Thanos's outlier rows dense: not n:m in any order


def test_spread_deals_the_ranks_round_robin_over_the_groups() -> None:
    importance = torch.tensor([5.0, 1.0, 4.0, 2.0, 3.0, 0.0, 7.0, 6.0])  # ranks: 6, 7, 0, 2, 4, 3, 1, 5
    perm = spread(importance, 4)
    assert perm.tolist() == [6, 0, 4, 1, 7, 2, 3, 5]  # group 0: ranks 0, 2, 4, 6; group 1: ranks 1, 3, 5, 7


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 6])
def test_assignment_is_the_brute_force_optimum(size: int) -> None:
    rng = np.random.default_rng(size)
    for trial in range(12):
        gain = rng.random((size, size))
        if trial % 3 == 0:
            gain = np.round(gain * 3)  # ties
        col = assign_max(gain)
        assert sorted(col.tolist()) == list(range(size))
        best = max(sum(gain[i, p[i]] for i in range(size)) for p in itertools.permutations(range(size)))
        assert sum(gain[i, col[i]] for i in range(size)) == pytest.approx(best, abs=1e-9)


def test_gain_is_the_kept_score_of_the_group_with_the_input_added() -> None:
    scores = torch.rand(7, 12, generator=torch.Generator().manual_seed(1))
    blocks = torch.randperm(12, generator=torch.Generator().manual_seed(2)).reshape(3, 4)  # (K, m)
    gain = _gains(scores, blocks, 1, 2)
    for i, j in itertools.product(range(3), range(3)):
        columns = [int(blocks[j, p]) for p in (0, 2, 3)] + [int(blocks[i, 1])]
        assert float(gain[i, j]) == pytest.approx(float(scores[:, columns].topk(2, dim=1).values.sum()), rel=1e-6)


def test_the_permutation_keeps_more_importance_than_the_identity() -> None:
    # the four important inputs sit side by side: 2:4 in the stored order keeps only two of them per row
    scores = torch.cat([torch.full((8, 4), 10.0), torch.rand(8, 4, generator=torch.Generator().manual_seed(0))], 1)
    perm, sums = find_permutation(scores, NM(2, 4))
    assert sorted(perm.tolist()) == list(range(8))
    assert sums["kept_identity"] == pytest.approx(kept_score(scores, NM(2, 4)))
    assert sums["kept_permuted"] == pytest.approx(8 * 4 * 10.0)  # every important weight kept
    assert sums["kept_permuted"] > sums["kept_identity"]
    assert kept_score(scores[:, perm], NM(2, 4)) == pytest.approx(sums["kept_permuted"])


def test_the_search_never_keeps_less_than_the_identity_on_random_scores() -> None:
    gen = torch.Generator().manual_seed(3)
    for width in (8, 32, 64):
        scores = torch.rand(16, width, generator=gen) * torch.rand(width, generator=gen) ** 2
        _, sums = find_permutation(scores, NM(2, 4))
        assert sums["kept_permuted"] >= sums["kept_identity"]


def _identity_spec() -> MethodSpec:
    """A "method" that returns the weight it got unchanged (dense), with an n:m keep-mask of its order."""
    def solve(W: torch.Tensor, stats: LinearStats, target: object, cfg: object, ctx: SolveContext) -> PruneResult:
        assert isinstance(target, NM)
        return PruneResult(weight=W.clone(), keep_mask=keep_nm(W.abs(), target))
    return MethodSpec(name="dense", fn=solve, config=get_method("wanda").config, needs=frozenset())


def test_permute_then_unpermute_leaves_a_dense_layer_unchanged() -> None:
    X, stats = correlated_stats(16, tokens=64)
    W = torch.randn(6, 16, generator=torch.Generator().manual_seed(4))
    result = permuted_solve(_identity_spec(), W, stats, NM(2, 4), None, SolveContext())
    assert torch.equal(result.weight, W)
    perm = torch.tensor(result.info["permutation"])
    torch.testing.assert_close(X[:, perm] @ W[:, perm].T, X @ W.T)  # the permuted layer computes the same
    moved = permute_stats(stats, perm)
    torch.testing.assert_close(moved.gram, (X[:, perm].T @ X[:, perm]) / 64, rtol=1e-5, atol=1e-6)
    pruned = W * keep_nm(W.abs(), NM(2, 4))  # the same change measured in either order
    assert reconstruction_errors(W[:, perm], pruned[:, perm], moved)[0] == pytest.approx(
        reconstruction_errors(W, pruned, stats)[0], rel=1e-5)


@pytest.mark.parametrize("name", NM_METHODS)
def test_every_nm_method_is_nm_in_the_permuted_order(name: str) -> None:
    assert name in METHODS and METHODS[name].supports(NM(2, 4))
    _, stats = correlated_stats(32, tokens=256)
    stats.cross, stats.dense_gram = stats.gram.clone(), stats.gram.clone()  # dense path = pruned path
    W = torch.randn(12, 32, generator=torch.Generator().manual_seed(5))
    before = W.clone()
    spec = get_method(name)
    result = permuted_solve(spec, W, stats, NM(2, 4), spec.make_config(QUICK.get(name, {})), SolveContext())
    assert torch.equal(W, before)
    perm = torch.tensor(result.info["permutation"])
    keep = result.keep_mask
    assert nm_violations(keep[:, perm], NM(2, 4)) == 0 and int(keep.sum()) == W.numel() // 2
    assert (result.weight[~keep] == 0).all() and torch.isfinite(result.weight).all()
    assert result.info["permute_kept"] >= result.info["permute_kept_identity"]


def test_permute_is_refused_before_work_where_there_is_no_nm() -> None:
    for sparsity, quant in (("50%", None), ("structured:30%", None), (None, "int4"), ("2:4", "int4")):
        with pytest.raises(ToolkitError, match="--permute") as caught:
            parse_compression(sparsity, quant, permute=True)
        assert "\n" not in str(caught.value)
    with pytest.raises(ToolkitError, match=r"flap supports structured"):
        RunConfig(model="tiny-llama", method="flap", sparsity="2:4", permute=True)
    with pytest.raises(ToolkitError, match="--refine"):
        RunConfig(model="tiny-llama", method="wanda", sparsity="2:4", permute=True, refine="dsnot")
    with pytest.raises(ToolkitError, match="--permute"):
        RunConfig(model="tiny-llama", method="rtn", sparsity=None, quant="int4", permute=True)


def test_the_spec_records_permute_and_reads_it_back() -> None:
    spec = parse_compression("2:4", permute=True)
    assert spec.label == "2:4+perm" and spec.to_dict()["permute"] is True
    assert Compression.from_dict(spec.to_dict()) == spec
    assert "permute" not in parse_compression("2:4").to_dict()  # records without it read as before
    assert Compression.from_dict(parse_compression("2:4").to_dict()).permute is False


def test_a_permuted_run_saves_an_ordinary_checkpoint(tmp_path: Path) -> None:
    from tests.models.test_chains import assert_plain_transformers, assert_reloads, run_saved, saved

    result, model = run_saved(tmp_path, "tiny-llama", "wanda", sparsity="2:4", permute=True)
    assert result["compression"]["permute"] is True and result["compression"]["label"] == "2:4+perm"
    assert_reloads(result, model)
    assert_plain_transformers(saved(result), model)
    record = open_run(result["run_dir"])
    solved = [e for e in record.events() if isinstance(e, SublayerPruned)]
    assert len(solved) == len(record.mask_names()) > 0
    moved = 0
    for event in solved:  # each linear's permutation is in its event; the stored mask is n:m in that order
        perm = torch.tensor(event.info["permutation"])
        keep = torch.from_numpy(record.load_mask(event.layer, event.name))
        assert nm_violations(keep[:, perm], NM(2, 4)) == 0 and int(keep.sum()) == keep.numel() // 2
        moved += int((perm != torch.arange(perm.numel())).any())
    assert moved > 0  # the permutation is not the identity everywhere
