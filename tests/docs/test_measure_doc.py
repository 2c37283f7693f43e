"""docs/measure.md is generated from benchmarks/results/measure_*.jsonl and stays in step with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.results_measure import render

ROOT = Path(__file__).resolve().parents[2]


def _entry(name: str, params: int, disk: int | None, decode: float) -> dict:
    speed = [{"batch": 1, "prefill_tokens_per_s": 100.0, "decode_tokens_per_s": decode}]
    return {"name": name, "dtype": "float32", "params": params, "bytes_on_disk": disk,
            "load": {"host_peak_mb": 300.0, "device_mb": None}, "speed": speed}


def _record(model: dict, dense: dict) -> dict:
    return {"benchmark": "measure", "method": "numerical", "sparsity": "structured:30%", "unit": "heads+channels",
            "device": "cpu", "threads": 1, "batches": [1], "prompt_tokens": 64, "new_tokens": 32, "repeats": 3,
            "models": [model, dense], "load_average": [3.0, 4.0], "wall_seconds": 60.0, "host_steal_share": None,
            "versions": {"git": "abcdef0123", "torch": "2.0"}}


def test_committed_page_is_up_to_date() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.results_measure", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_record_becomes_a_table_with_ratios() -> None:
    page = render([_record(_entry("runs/x/model", 70, 2**20, 12.0), _entry("smollm2-135m", 100, 2 * 2**20, 10.0))])
    assert "### numerical structured:30% heads+channels vs smollm2-135m" in page
    assert "| safetensors on disk (MiB) | 1.0 | 2.0 | 0.50 |" in page
    assert "| decode tokens/s, batch 1 | 12.0 | 10.0 | 1.20 |" in page
    assert "commit abcdef0" in page and "not smaller or faster" not in page


def test_a_dense_stored_model_says_it_is_not_smaller_or_faster() -> None:
    page = render([_record(_entry("runs/w/model", 100, 2 * 2**20, 10.2), _entry("smollm2-135m", 100, None, 10.0))])
    assert "not smaller or faster as saved" in page and "its speed ratios, 1.00 to 1.02, are" in page
    assert "| safetensors on disk (MiB) | 2.0 | – | – |" in page
