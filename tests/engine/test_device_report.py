"""Which device(s) ran and the GPU memory peak: CLI summary, result.json, the app's result panel."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from app.views import result_markdown
from toolkit.cli.main import main
from toolkit.engine.device_report import devices_label, gpu_peak_mb
from toolkit.engine.state import EngineConfig
from toolkit.events import RunFinished
from toolkit.live.view import RunView, fold


def test_cpu_runs_report_the_device_and_no_gpu_peak() -> None:
    cpu = torch.device("cpu")
    assert devices_label(cpu, EngineConfig(), "pruned") == "cpu"
    assert devices_label(cpu, EngineConfig(devices="cpu,cpu"), "dense") == "cpu, cpu"
    assert gpu_peak_mb([cpu]) is None
    assert gpu_peak_mb([cpu], remote_mb=512.0) == 512.0  # another rank's GPU


def test_result_panel_shows_devices_and_gpu_peak() -> None:
    finished = RunFinished(achieved_sparsity=0.5, prune_seconds=1.0, ppl={}, dense_ppl={},
                           devices="2 ranks × cpu (gloo)")
    view = fold([finished], RunView(status="running"))
    assert math.isnan(view.gpu_peak_mb)
    assert "| ran on · GPU memory peak | | 2 ranks × cpu (gloo) · n/a |" in result_markdown(view)
    view = fold([RunFinished(achieved_sparsity=0.5, prune_seconds=1.0, ppl={}, dense_ppl={}, devices="cuda:0",
                             gpu_peak_mb=1234.4)], RunView(status="running"))
    assert "cuda:0 · 1234 MiB" in result_markdown(view)


def test_cli_summary_and_json_name_the_device(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "result.json"
    code = main(["prune", "--model", "tiny-llama", "--method", "magnitude", "--nsamples", "2", "--seqlen", "32",
                 "--eval", "none", "--device", "cpu", "--out", str(tmp_path / "runs"), "--json", str(out)])
    assert code == 0
    assert "ran on cpu  GPU memory peak n/a" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["devices"] == "cpu" and result["gpu_peak_mb"] is None
