"""The GPU goals of docs/results.md's Scale section: "not measured" without a GPU record, met or not with one."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.results_scale import render_gpu_goals


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _gpu(method: str, layers: int, seconds: float, peak: float) -> dict:
    return {"benchmark": "scale", "device": "cuda:0", "shape": "llama-2-7b", "nsamples": 128, "seqlen": 2048,
            "method": method, "layers": layers, "prune_seconds": seconds, "gpu_peak_mib": peak}


def test_without_a_gpu_record_every_goal_reads_not_measured(tmp_path: Path) -> None:
    cpu = {**_gpu("wanda", 32, 10.0, 0.0), "device": "cpu"}
    text = "\n".join(render_gpu_goals([_write(tmp_path / "scale_cpu.jsonl", [cpu])]))
    assert text.count("not measured: no GPU run on record") == 4  # three methods and the memory peak
    assert "| met |" not in text and "not met" not in text


def test_gpu_records_are_compared_with_the_goals_and_fewer_layers_are_scaled(tmp_path: Path) -> None:
    records = [_gpu("wanda", 32, 40.0, 20000.0), _gpu("sparsegpt", 32, 130.0, 21000.0),
               _gpu("fista", 2, 40.0, 26000.0)]  # 2 layers × 16 = 640 s against 480 s
    text = "\n".join(render_gpu_goals([_write(tmp_path / "scale_gpu.jsonl", records)]))
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    assert "40 s (32 layers, cuda:0)" in rows["wanda"] and "| met |" in rows["wanda"]
    assert "130 s" in rows["sparsegpt"] and "not met" in rows["sparsegpt"]
    assert "640 s (2 layers × 16, cuda:0)" in rows["fista"] and "not met" in rows["fista"]
    assert "26000 MiB (not met)" in text  # the largest peak against 24 GB
