"""The benchmark run syntax method@sparsity[:key=value,...] (2:4 and structured:30% contain colons)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.bench_prune import layer_error_summary, parse_run, split_spec
from benchmarks.host_clock import Clock


@pytest.mark.parametrize(("text", "expected"), [
    ("sparsegpt@2:4", ("sparsegpt", "2:4", {})),
    ("wanda@structured:30%", ("wanda", "structured:30%", {})),
    ("thanos@structured:30%:alpha=0", ("thanos", "structured:30%", {"alpha": "0"})),
    ("fista@50%:warm_start=wanda,max_rounds=3", ("fista", "50%", {"warm_start": "wanda", "max_rounds": "3"})),
    ("thanos@4:8:alpha=0.1", ("thanos", "4:8", {"alpha": "0.1"})),
])
def test_parse_run(text: str, expected: tuple) -> None:
    assert parse_run(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("awp@50%+int4", {"sparsity": "50%", "quant": "int4", "unit": None}),
    ("awp@2:4+int3:g64", {"sparsity": "2:4", "quant": "int3:g64", "unit": None}),
    ("rtn@int2", {"sparsity": None, "quant": "int2", "unit": None}),
    ("numerical@structured:30%:unit=heads", {"sparsity": "structured:30%", "quant": None, "unit": "heads"}),
    ("wanda@50%", {"sparsity": "50%", "quant": None, "unit": None}),
])
def test_split_spec_moves_quant_and_unit_into_the_spec(text: str, expected: dict) -> None:
    _, sparsity, options = parse_run(text)
    assert split_spec(sparsity, options) == expected
    assert "unit" not in options


def test_grid_puts_each_run_in_its_variant_row_and_sparsity_column() -> None:
    from benchmarks.table import grid, variant

    def record(method: str, sparsity: str, ppl: float, **options: str) -> dict:
        return {"method": method, "sparsity": sparsity, "options": options, "propagate": "pruned",
                "ppl": {"wiki": ppl}, "prune_seconds": 1.0, "peak_rss_mb": 2.0}

    records = [record("wanda", "50%", 36.5), record("thanos", "2:4", 45.0, alpha="0.1"), record("wanda", "2:4", 138.0),
               {**record("fista", "50%", 25.0), "propagate": "dense"}]
    assert variant(records[1]) == "thanos (alpha=0.1)" and variant(records[3]) == "fista (propagate=dense)"
    lines = grid(records, lambda r: f"{r['ppl']['wiki']:.1f}")
    assert lines[0] == "| method | 50% | 2:4 |"
    assert lines[2:] == ["| wanda | 36.5 | 138.0 |", "| thanos (alpha=0.1) |  | 45.0 |",
                         "| fista (propagate=dense) | 25.0 |  |"]



def test_rows_keep_runs_that_differ_only_in_the_calibration_seed(tmp_path: Path) -> None:
    import json

    from benchmarks.table import rows, variant

    def record(seed: int | None, ppl: float) -> dict:
        protocol = {} if seed is None else {"calibration": {"seed": seed}}
        return {"method": "flap", "sparsity": "structured:10%", "options": {}, "propagate": "pruned",
                "ppl": {"wiki": ppl}, "protocol": protocol}

    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (record(None, 1.0), record(0, 2.0), record(1, 3.0))))
    kept = rows([str(path)])
    assert [r["ppl"]["wiki"] for r in kept] == [2.0, 3.0]  # no seed = seed 0: the later record replaces it
    assert [variant(r) for r in kept] == ["flap", "flap (seed=1)"]

def test_host_clock_reports_the_stolen_share_of_all_cpus_and_the_process_cpu_time() -> None:
    start = Clock(wall=10.0, cpu=1.0, steal=100.0)
    end = Clock(wall=14.0, cpu=6.5, steal=102.0)
    seen = end.since(start)
    assert seen["process_cpu_seconds"] == 5.5
    assert seen["host_steal_share"] == round(2.0 / (4.0 * (os.cpu_count() or 1)), 4)
    assert Clock(wall=14.0, cpu=6.5, steal=None).since(start)["host_steal_share"] is None


def test_host_clock_reads_this_machine() -> None:
    first = Clock.now()
    sum(i * i for i in range(200_000))
    seen = Clock.now().since(first)
    assert seen["process_cpu_seconds"] is not None and seen["process_cpu_seconds"] >= 0
    share = seen["host_steal_share"]
    assert share is None or 0.0 <= share <= 1.0


def test_layer_error_summary_means_the_layers_and_keeps_not_measured_null() -> None:
    summary = layer_error_summary({"mode": "sample", "measured": True, "windows": 4, "per_layer": [0.1, 0.3]})
    assert summary is not None
    assert summary["mean"] == pytest.approx(0.2)
    assert summary["windows"] == 4
    assert summary["per_layer"] == [0.1, 0.3]
    skipped = layer_error_summary({"mode": "none", "measured": False, "windows": None, "per_layer": None})
    assert skipped is not None
    assert skipped["mean"] is None
    assert skipped["per_layer"] is None
    assert layer_error_summary(None) is None
