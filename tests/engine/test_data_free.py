"""Data-free methods (magnitude, RTN) skip the calibration path: no layer forward, the same weights.

The weights equal those of the calibrated path (``calibrate="always"``) bit for bit; no decoder layer ever
runs a forward; each linear reports ‖ΔW‖/‖W‖ and every layer's output error is None ("no calibration").
Options that read activations (OWL, permute) keep the calibrated path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from app.views import result_markdown
from tests.helpers.counted_prune import prune_counting
from toolkit.cli.main import main
from toolkit.engine.data_free import needs_calibration
from toolkit.engine.state import EngineConfig
from toolkit.errors import ToolkitError
from toolkit.events import LayerDone, SublayerPruned
from toolkit.figures.registry import figure
from toolkit.figures.run import NO_CALIBRATION, WEIGHT_ERROR_TITLE
from toolkit.live.view import fold
from toolkit.methods import get_method
from toolkit.models.load import load_model
from toolkit.spec.allocation import parse_allocation
from toolkit.spec.compression import parse_compression
from toolkit.store.runs import list_runs


@pytest.mark.parametrize(("family", "method", "compression"), [
    ("tiny-llama", "magnitude", "50%"), ("tiny-qwen2", "magnitude", "2:4"), ("tiny-gemma3", "rtn", "int4:g32"),
    ("tiny-opt", "magnitude", "50%"),
])
def test_no_forward_runs_and_the_weights_equal_the_calibrated_path(family: str, method: str,
                                                                   compression: str) -> None:
    parsed = parse_compression(None if compression.startswith("int") else compression,
                               compression if compression.startswith("int") else None, None)
    free, calibrated = load_model(family).model, load_model(family).model
    events, forwards = prune_counting(free, method, parsed)
    reference, reference_forwards = prune_counting(calibrated, method, parsed, calibrate="always")
    assert forwards == 0 and reference_forwards > 0
    for (name, x), (_, y) in zip(free.state_dict().items(), calibrated.state_dict().items(), strict=True):
        assert torch.equal(x, y), name
    done = [e for e in events if isinstance(e, LayerDone)]
    pruned = [e for e in events if isinstance(e, SublayerPruned)]
    assert done and all(e.output_rel_error is None for e in done)
    assert pruned and all(e.rel_error != e.rel_error and 0 < e.weight_rel_error < 1 for e in pruned)  # nan, set
    calibrated_pruned = [e for e in reference if isinstance(e, SublayerPruned)]
    assert all(e.weight_rel_error != e.weight_rel_error and e.rel_error > 0 for e in calibrated_pruned)


def test_options_that_read_activations_keep_the_calibrated_path() -> None:
    spec, cfg = get_method("magnitude"), EngineConfig()
    plain = parse_compression("50%", None, None)
    assert not needs_calibration(spec, plain, cfg)
    assert needs_calibration(spec, plain, EngineConfig(allocation=parse_allocation("owl")))
    assert needs_calibration(spec, parse_compression("2:4", None, None, permute=True), cfg)
    assert needs_calibration(spec, plain, EngineConfig(calibrate="always"))
    assert needs_calibration(get_method("wanda"), plain, cfg)
    with pytest.raises(ToolkitError, match="calibrate must be one of"):
        EngineConfig(calibrate="sometimes")


def test_a_data_free_run_reads_no_calibration_text_and_says_so(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere.txt"  # never read: the run would fail if it were
    assert main(["prune", "--model", "tiny-llama", "--method", "magnitude", "--protocol", "quick",
                 "--calib", str(missing), "--out", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "no calibration: magnitude reads the weights alone" in out and f"--calib {missing} is not used" in out
    assert "relative weight error ‖ΔW‖/‖W‖ per linear (no calibration data)" in out
    assert "layer output error: not measured (no calibration: the method reads the weights alone)" in out
    (record,) = list_runs(tmp_path / "runs")
    result = json.loads((record.path / "result.json").read_text())
    assert result["protocol"]["calibration"]["used"] is False
    assert result["layer_error"] == {"mode": "no calibration", "measured": False, "windows": None, "per_layer": None}
    assert all(row["rel_error"] is None and 0 < row["weight_rel_error"] < 1 for row in result["layers"])
    view = fold(record.iter_events())
    heatmap = figure(view, "heatmap")
    assert heatmap.layout.title.text.startswith(WEIGHT_ERROR_TITLE) and heatmap.data[0].z[0][0] is not None
    assert [a.text for a in figure(view, "layers").layout.annotations] == [NO_CALIBRATION]
    assert "No calibration: magnitude reads the weights alone" in result_markdown(view)  # the app's result card


def test_a_calibrated_method_still_reads_its_calibration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prune", "--model", "tiny-llama", "--method", "wanda", "--protocol", "quick",  # wanda reads it:
                 "--calib", str(tmp_path / "nowhere.txt"), "--out", str(tmp_path / "runs")]) == 2  # refused at once
    captured = capsys.readouterr()
    assert "nowhere.txt' is not a known dataset or an existing file" in captured.err
    assert "no calibration" not in captured.out
