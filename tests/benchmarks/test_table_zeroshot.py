"""The README's zero-shot table is built from `prune --tasks … --json` result files."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.table_zeroshot import load, main, table


def _result(method: str, dense: dict[str, float], pruned: dict[str, float]) -> dict:
    def details(values: dict[str, float]) -> dict:
        return {"tasks": {t: {"metrics": {"acc": v, "acc_stderr": 0.05}, "seconds": 10.0} for t, v in values.items()}}

    return {"model": "m", "method": method, "sparsity": "50%", "zero_shot": {
        "dense": dense, "pruned": pruned, "limit": 40,
        "mean": {"dense": sum(dense.values()) / len(dense), "pruned": sum(pruned.values()) / len(pruned)},
        "tasks": {t: {"metric": "acc"} for t in dense},
        "details": {"dense": details(dense), "pruned": details(pruned)}}}


def test_dense_row_then_one_row_per_run_with_means_and_stderr(tmp_path: Path) -> None:
    files = []
    for method, pruned in (("wanda", {"rte": 0.5, "boolq": 0.25}), ("sparsegpt", {"rte": 0.75, "boolq": 0.5})):
        path = tmp_path / f"{method}.json"
        path.write_text(json.dumps(_result(method, {"rte": 0.5, "boolq": 0.75}, pruned)))
        files.append(str(path))
    lines = table(load(files))
    assert lines[0] == "| model | rte (acc) | boolq (acc) | mean | seconds |"
    assert lines[2] == "| dense | 50.0 | 75.0 | 62.5 | 20 |"
    assert lines[3] == "| wanda 50% | 50.0 | 25.0 | 37.5 | 20 |"
    assert lines[4] == "| sparsegpt 50% | 75.0 | 50.0 | 62.5 | 20 |"
    assert lines[5] == "| ± stderr (dense) | 5.0 | 5.0 | | |"


def test_files_without_zero_shot_are_an_error(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"model": "m"}))
    assert main([str(path)]) == 2
