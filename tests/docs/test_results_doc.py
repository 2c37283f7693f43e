"""docs/results.md is generated from benchmarks/results/ and stays in step with it (no torch, no network)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.results_render import digest_rows, digest_table, render_ppl_grid, render_runs
from tests.helpers.records import write_jsonl

ROOT = Path(__file__).resolve().parents[2]


def _record(**overrides: object) -> dict:
    record = {"benchmark": "prune", "run": "wanda@50%", "model": "tiny", "method": "wanda", "sparsity": "50%",
              "options": {}, "propagate": "pruned", "achieved_sparsity": 0.5, "ppl": {"wiki": 12.3456},
              "dense_ppl": {"wiki": 10.0}, "prune_seconds": 41.6, "total_seconds": 50.0, "peak_rss_mb": 2047.5,
              "protocol": {"calibration": {"source": "wiki", "split": "train", "nsamples": 2, "seqlen": 8,
                                           "seed": 0}, "evaluation": None}}
    record.update(overrides)
    return record


def test_committed_page_is_up_to_date() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.results_doc", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_grid_row_from_a_synthetic_record(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "cpu_full_tiny.jsonl",
                  [_record(), _record(run="fista@2:4:xi=0.1", method="fista", sparsity="2:4", options={"xi": "0.1"},
                                      ppl={"wiki": 30.0}, achieved_sparsity=0.45)])
    lines = render_ppl_grid([path])
    assert "| method | 50% | 2:4 |" in lines
    assert "| wanda | 12.35 |  |" in lines
    assert "| fista (xi=0.1) |  | 30.00 |" in lines
    assert "| wanda | 42 s / 2048 |  |" in lines
    assert "| fista (xi=0.1) |  | 0.4500 |" in lines


def test_timing_rows_keep_repeats(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "speed.jsonl", [_record(ppl={}), _record(ppl={}, prune_seconds=39.04)])
    lines = render_runs([path])
    assert lines[2:] == ["| wanda@50% |  | 41.6 | 50.0 |  |  | 2048 |  |",
                         "| wanda@50% |  | 39.0 | 50.0 |  |  | 2048 |  |"]


def test_digest_pairs_say_identical_or_not() -> None:
    before = [{"run": "a@50%", "weights_sha256": "0" * 64, "git": "x", "abs_sums": {"w": 2.0}},
              {"run": "b@50%", "weights_sha256": "1" * 64, "git": "x", "abs_sums": {"w": 4.0}}]
    after = [{"run": "a@50%", "weights_sha256": "0" * 64, "git": "y", "abs_sums": {"w": 2.0}},
             {"run": "b@50%", "weights_sha256": "2" * 64, "git": "y", "abs_sums": {"w": 5.0}}]
    lines = digest_table(digest_rows(before, after))
    assert lines[2] == f"| a@50% | x `{'0' * 12}` | y `{'0' * 12}` | yes |  |"
    assert lines[3] == f"| b@50% | x `{'1' * 12}` | y `{'2' * 12}` | no | 2.50e-01 |"
