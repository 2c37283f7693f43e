"""bench_solve's records: the LAPACK share of SparseGPT's and Thanos's solves is reported against the floor."""

from __future__ import annotations

import pytest
import torch

from benchmarks.bench_solve import LAPACK_OPS, bench_obs, flops_thanos, lapack_clock
from benchmarks.bench_thanos_layer import random_stats


def test_the_lapack_calls_of_both_solves_are_counted_against_the_same_floor() -> None:
    stats = random_stats(128, 512, torch.device("cpu"), 0)
    W = torch.randn(96, 128, generator=torch.Generator().manual_seed(1)) * 0.02
    sparsegpt, thanos = bench_obs("small", W, stats, rate=1e9, official=None)
    assert thanos["solver"] == "thanos" and thanos["flops"] == flops_thanos(96, 128)
    assert set(thanos["lapack_ops"]) == set(LAPACK_OPS)  # the factor, its inverse and the per-row solves
    assert set(sparsegpt["lapack_ops"]) == {"linalg.cholesky_ex", "cholesky_inverse"}  # no small solves
    for record in (sparsegpt, thanos):
        assert record["lapack_seconds"] == pytest.approx(sum(record["lapack_ops"].values()), abs=2e-3)
        assert record["lapack_share"] * record["seconds"] == pytest.approx(record["lapack_seconds"],
                                                                          abs=1e-3 + 5e-4 * record["seconds"])
        floor = record["floor_seconds"]  # each figure is rounded in the record: compare within that rounding
        assert record["lapack_over_floor"] * floor == pytest.approx(record["lapack_seconds"], abs=1e-3 + 5e-3 * floor)


def test_the_lapack_clock_counts_each_call_and_restores_torch() -> None:
    originals = (torch.linalg.cholesky_ex, torch.cholesky_inverse, torch.linalg.solve_ex)
    A = torch.eye(8) * 2.0
    with lapack_clock() as spent:
        L, _ = torch.linalg.cholesky_ex(A)
        torch.cholesky_inverse(L)
    assert set(spent) == {"linalg.cholesky_ex", "cholesky_inverse"} and all(s >= 0 for s in spent.values())
    assert (torch.linalg.cholesky_ex, torch.cholesky_inverse, torch.linalg.solve_ex) == originals
