"""The benchmark run syntax method@sparsity[:key=value,...] (2:4 and structured:30% contain colons)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from bench_prune import parse_run  # noqa: E402


@pytest.mark.parametrize(("text", "expected"), [
    ("sparsegpt@2:4", ("sparsegpt", "2:4", {})),
    ("wanda@structured:30%", ("wanda", "structured:30%", {})),
    ("thanos@structured:30%:alpha=0", ("thanos", "structured:30%", {"alpha": "0"})),
    ("fista@50%:warm_start=wanda,max_rounds=3", ("fista", "50%", {"warm_start": "wanda", "max_rounds": "3"})),
    ("thanos@4:8:alpha=0.1", ("thanos", "4:8", {"alpha": "0.1"})),
])
def test_parse_run(text: str, expected: tuple) -> None:
    assert parse_run(text) == expected
