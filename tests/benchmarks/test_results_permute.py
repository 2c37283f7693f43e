"""The permutation table of docs/results.md: each method and n:m pattern without and with --permute, paired by
options, with the change; a side not measured says so; RIA's unstructured runs listed below."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.results_permute import render_permute

PROTOCOL = {"evaluation": {"all_windows": True}}


def _run(run: str, method: str, sparsity: str, ppl: float, permute: bool = False, **options: str) -> dict:
    return {"benchmark": "prune", "run": run, "method": method, "sparsity": sparsity, "options": options,
            "permute": permute, "ppl": {"wiki": ppl}, "protocol": PROTOCOL, "run_dir": f"runs/{run}",
            "versions": {"git": "abc1234"}}


def test_pairs_without_and_with_permute_and_says_what_is_missing(tmp_path: Path) -> None:
    records = [_run("wanda@2:4", "wanda", "2:4", 100.0), _run("wanda@2:4:permute=1", "wanda", "2:4", 80.0, True),
               _run("thanos@4:8:alpha=0.1", "thanos", "4:8", 40.0, alpha="0.1"),
               _run("sparsegpt@50%", "sparsegpt", "50%", 30.0),  # unstructured, not RIA: not in the table
               _run("ria@50%", "ria", "50%", 38.0)]
    path = tmp_path / "cpu_permute.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in render_permute([path])
            if line.startswith("| ") and not line.startswith("| method")}
    assert "| 100.00 | 80.00 | -20.0 % |" in rows[("wanda", "2:4")]
    assert "| 40.00 | not measured | not measured |" in rows[("thanos (alpha=0.1)", "4:8")]
    assert "| 38.00 | – | – |" in rows[("ria", "50%")]
    assert ("sparsegpt", "50%") not in rows
