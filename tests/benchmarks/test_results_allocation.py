"""The allocation table of docs/results.md: a cell per variant, uniform cells from the grid, recovery rows."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.bench_recover import parent_label
from benchmarks.results_allocation import render_allocation

ALL = {"evaluation": {"all_windows": True}}


def _allocation(method: str, sparsity: str, allocation: str, refine: str | None, ppl: float) -> dict:
    return {"benchmark": "allocation", "method": method, "sparsity": sparsity, "allocation": allocation,
            "refine": refine, "ppl": {"wiki": ppl}, "prune_seconds": 60.0, "plan_seconds": 20.0,
            "refine_seconds": 5.0 if refine else 0.0, "total_seconds": 300.0, "dsnot_swaps": 12 if refine else None,
            "rel_error_before_refine": 0.3 if refine else None, "rel_error_after_refine": 0.2 if refine else None}


def _write(tmp_path: Path, name: str, records: list[dict]) -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_each_variant_has_its_cell_and_missing_ones_say_not_measured(tmp_path: Path) -> None:
    runs = _write(tmp_path, "allocation_cpu.jsonl", [
        _allocation("wanda", "70%", "owl:5,0.08", None, 782.52),
        _allocation("wanda", "70%", "uniform", "dsnot:50", 700.25),
        {"benchmark": "recover", "parent": "wanda 70% owl:5,0.08", "steps": 40, "ppl_before": 782.52,
         "ppl_after": 120.5, "seconds": 900.0, "total_seconds": 1500.0},
    ])
    grid = _write(tmp_path, "cpu_full.jsonl", [
        {"benchmark": "prune", "run": "wanda@70%", "options": {}, "protocol": ALL, "ppl": {"wiki": 731.36},
         "prune_seconds": 62.0, "versions": {"git": "c6b77e1"}},
        {"benchmark": "prune", "run": "wanda@60%", "options": {}, "protocol": ALL, "ppl": {"wiki": 109.7},
         "prune_seconds": 54.0, "versions": {"git": "c6b77e1"}},  # no allocation run at 60 %: no row
        {"benchmark": "prune", "run": "wanda@70%", "options": {"alpha": "1"}, "protocol": ALL, "ppl": {"wiki": 1.0},
         "prune_seconds": 1.0},  # another variant of the method: never a uniform cell
    ])
    text = "\n".join(render_allocation([runs, grid]))
    assert "| wanda | 70% | 731.36 | 782.52 | 700.25 | not measured |" in text
    assert "60%" not in text.split("Seconds of each step")[0]
    assert "wanda@70% at `c6b77e1`" in text
    assert "| wanda 70% owl:5,0.08 | 40 | 782.52 | 120.50 | 900 | 1500 |" in text


def test_the_recovery_parent_is_named_by_method_sparsity_allocation_and_refinement(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"method": "fista", "sparsity": "60%",
                                                      "allocation": "owl:5,0.08", "refine": "dsnot:50"}))
    assert parent_label(tmp_path) == "fista 60% owl:5,0.08 + dsnot:50"
    (tmp_path / "config.json").write_text(json.dumps({"method": "wanda", "sparsity": "70%", "allocation": None}))
    assert parent_label(tmp_path) == "wanda 70% uniform"


def test_rows_go_by_method_then_sparsity_whatever_order_the_runs_came_in(tmp_path: Path) -> None:
    runs = _write(tmp_path, "allocation_cpu.jsonl", [
        _allocation("fista", "60%", "owl", None, 40.0), _allocation("sparsegpt", "70%", "owl", None, 147.0),
        _allocation("wanda", "70%", "owl", None, 782.0), _allocation("wanda", "60%", "owl", None, 113.0),
    ])
    table = render_allocation([runs])
    rows = [line.split(" | ")[0:2] for line in table[2:6]]
    assert rows == [["| wanda", "60%"], ["| wanda", "70%"], ["| sparsegpt", "70%"], ["| fista", "60%"]]


def test_the_grid_resumes_past_the_recoveries_in_its_file(tmp_path: Path) -> None:
    """bench_allocation skips the runs its file has and reads past the recovery records beside them."""
    from benchmarks.bench_allocation import done_keys

    path = _write(tmp_path, "allocation_cpu.jsonl", [
        {**_allocation("fista", "60%", "owl:5,0.08", None, 39.2), "eval_windows": None},
        {"benchmark": "recover", "parent": "fista 60% owl:5,0.08", "steps": 40, "ppl_before": 39.2, "ppl_after": 28.9},
    ])
    assert done_keys(str(path)) == {("fista", "60%", "owl:5,0.08", "None", None)}
