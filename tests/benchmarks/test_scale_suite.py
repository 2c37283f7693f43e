"""benchmarks/gpu/scale_suite.sh: the GPU suite's mechanics on the CPU (its smoke set), and a wrong SUITE refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "benchmarks" / "gpu" / "scale_suite.sh"


def _run(tmp_path: Path, suite: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEVICE="cpu", SUITE=suite, PY=sys.executable, OUT=str(tmp_path / "out"),
               WORK=str(tmp_path / "work"), PRUNELAB_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="2")
    return subprocess.run(["bash", str(SUITE)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
                          check=False)


def test_an_unknown_suite_is_one_line_and_runs_nothing(tmp_path: Path) -> None:
    done = _run(tmp_path, "everything")
    assert done.returncode == 2
    assert done.stderr.strip() == "error: SUITE must be smoke, quick or full, not 'everything'"
    assert not (tmp_path / "out" / "scale_gpu.jsonl").exists()


@pytest.mark.slow
def test_the_smoke_suite_writes_one_bench_scale_record(tmp_path: Path) -> None:
    done = _run(tmp_path, "smoke")
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in (tmp_path / "out" / "scale_gpu.jsonl").read_text().splitlines()]
    assert len(records) == 1, (tmp_path / "out" / "suite.log").read_text()[-3000:]
    record = records[0]
    assert record["benchmark"] == "scale" and record["device"] == "cpu" and record["method"] == "wanda"
    assert record["shape"] == "llama-2-7b" and record["layers"] == 1 and record["rss_peak_mib"] > 0
    assert "suite done" in (tmp_path / "out" / "suite.log").read_text()
