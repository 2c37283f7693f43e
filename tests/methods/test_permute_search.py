"""The permutation search gives the same permutations and masks as before its assignment was vectorised.

``tests/fixtures/permute_search_before.json`` holds what ``toolkit/methods/permute.py`` returned before
the augmenting row reduction (``_reduce_rows``) was added: the permutation and a digest of the n:m
keep-mask for seeded scores of several shapes and patterns, and the assignment of seeded gain matrices.
The masks are the same; where inputs are interchangeable (kept in every row or pruned in every row whichever
group holds them, so every placement keeps the same score) the optimum is not unique and their places may differ.
The brute-force checks of the assignment itself are in tests/engine/test_permute.py.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from toolkit.methods.masks import keep_nm
from toolkit.methods.permute import _augment, _reduce_rows, assign_max, find_permutation
from toolkit.spec.targets import NM

BEFORE = json.loads((Path(__file__).parents[1] / "fixtures" / "permute_search_before.json").read_text())


def seeded_scores(out: int, width: int, seed: int, tail: float) -> torch.Tensor:
    """|N(0, 1)| weights (out, width) times log-normal input norms: as the fixture's generator made them."""
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(out, width, generator=gen).abs()
    return weight * torch.exp(tail * torch.randn(width, generator=gen))


@pytest.mark.parametrize("case", BEFORE["searches"], ids=lambda c: f"{c['out']}x{c['in']}@{c['n']}:{c['m']}")
def test_the_search_gives_the_same_permutation_and_mask_as_before(case: dict) -> None:
    scores = seeded_scores(case["out"], case["in"], case["seed"], case["tail"])
    assert float(scores.double().sum()) == pytest.approx(case["scores_sum"], rel=1e-6)  # the same inputs
    target = NM(case["n"], case["m"])
    perm, sums = find_permutation(scores, target)
    keep = keep_nm(scores[:, perm], target)[:, torch.argsort(perm)]  # the mask in the stored order
    assert hashlib.sha256(keep.numpy().tobytes()).hexdigest() == case["keep_sha256"]
    moved = sorted({int(i) for i, j in zip(perm.tolist(), case["perm"], strict=True) if i != j})
    # with few rows the assignment can tie (inputs whose places swap without changing any row's kept set):
    # those may sit elsewhere, the mask above is the same; the digests with many rows give the same permutation
    if case["out"] >= 96:
        assert not moved
    assert sums["kept_permuted"] == pytest.approx(case["kept_permuted"], rel=1e-6)  # float32 sums, another order


@pytest.mark.parametrize("case", BEFORE["assignments"], ids=lambda c: f"K{c['size']}")
def test_the_assignment_is_the_same_as_before(case: dict) -> None:
    rng = np.random.default_rng(case["seed"])
    size = case["size"]
    gain = rng.random((size, size)) * rng.random(size)[None] * 10
    assert assign_max(gain).tolist() == case["col"]


def _hungarian_only(gain: np.ndarray) -> np.ndarray:
    """The assignment with every free row added by the Dijkstra search (no row reduction): the reference."""
    size = gain.shape[0]
    cost = gain.max() - gain
    v = cost.min(axis=0)
    u = (cost - v).min(axis=1)
    owner = np.full(size, -1, dtype=np.int64)
    for row in range(size):
        _augment(cost, u, v, owner, row)
    col = np.empty(size, dtype=np.int64)
    col[owner] = np.arange(size)
    return col


@pytest.mark.parametrize("seed", range(6))
def test_the_row_reduction_keeps_the_potentials_feasible_and_the_matches_tight(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    size = 40
    gain = np.round(rng.random((size, size)) * 4) if seed % 2 else rng.random((size, size))  # ties on odd seeds
    cost = gain.max() - gain
    v = cost.min(axis=0)
    u = (cost - v).min(axis=1)
    owner = np.full(size, -1, dtype=np.int64)
    _reduce_rows(cost, u, v, owner)
    reduced = cost - u[:, None] - v
    assert reduced.min() >= -1e-12  # dual feasible
    rows = owner[owner >= 0]
    assert len(set(rows.tolist())) == rows.size  # a row holds one column
    assert np.abs(reduced[rows, np.flatnonzero(owner >= 0)]).max(initial=0.0) <= 1e-12  # matched edges tight
    col = assign_max(gain)
    best = gain[np.arange(size), _hungarian_only(gain)].sum()
    assert gain[np.arange(size), col].sum() == pytest.approx(best, abs=1e-9)  # still optimal


def test_the_assignment_matches_brute_force_on_small_ties() -> None:
    rng = np.random.default_rng(7)
    for _ in range(30):
        gain = np.round(rng.random((6, 6)) * 2)
        col = assign_max(gain)
        best = max(sum(gain[i, p[i]] for i in range(6)) for p in itertools.permutations(range(6)))
        assert sorted(col.tolist()) == list(range(6)) and gain[np.arange(6), col].sum() == pytest.approx(best)
