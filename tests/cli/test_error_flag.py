"""``--error none`` end to end on tiny-llama: the same checkpoint, a null error in result.json and the events,
and every view that draws the layer output error saying what it does not draw."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from toolkit.cli.main import main
from toolkit.cli.view import layer_error_line
from toolkit.compare.overlay import overlay_runs
from toolkit.errors import ToolkitError
from toolkit.events import LayerDone
from toolkit.figures.overlay import layer_overlay_figure
from toolkit.figures.registry import figure
from toolkit.live.view import fold
from toolkit.run.config import RunConfig
from toolkit.store.runs import RunRecord, list_runs

TINY = ["--model", "tiny-llama", "--nsamples", "6", "--seqlen", "64", "--eval", "none", "--error-windows", "2"]
NOT_DRAWN = "not measured, the run used --error none"
OVERLAY_NOT_DRAWN = "not measured (--error none, or a data-free method that runs no calibration)"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunRecord]:
    """One run with the default error and one with ``--error none``, same protocol, both saved."""
    root = tmp_path_factory.mktemp("error")
    found = {}
    for mode in ("sample", "none"):
        out = root / mode
        assert main(["prune", *TINY, "--error", mode, "--save-model", "--out", str(out)]) == 0
        (record,) = list_runs(out)
        found[mode] = record
    return found


def _tensors(record: RunRecord) -> dict:
    folder = Path(record.path) / "model"
    tensors = {}
    for file in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(str(file)))
    return tensors


def test_the_checkpoint_is_bit_identical(runs: dict[str, RunRecord]) -> None:
    sampled, unmeasured = _tensors(runs["sample"]), _tensors(runs["none"])
    assert sampled.keys() == unmeasured.keys() and sampled
    for name, tensor in sampled.items():
        assert tensor.equal(unmeasured[name]), name


def test_result_and_events_say_not_measured_with_null(runs: dict[str, RunRecord]) -> None:
    result = json.loads((Path(runs["none"].path) / "result.json").read_text(encoding="utf-8"))
    assert result["layer_error"] == {"mode": "none", "measured": False, "windows": None, "per_layer": None}
    assert result["engine"]["error"] == "none" and runs["none"].config["error"] == "none"
    lines = [json.loads(line) for line in (Path(runs["none"].path) / "events.jsonl").read_text().splitlines()]
    done = [line for line in lines if line["type"] == "LayerDone"]
    assert len(done) == 2 and all(line["output_rel_error"] is None for line in done)
    sampled = json.loads((Path(runs["sample"].path) / "result.json").read_text(encoding="utf-8"))["layer_error"]
    assert sampled["mode"] == "sample" and sampled["measured"] and sampled["windows"] == 2
    assert len(sampled["per_layer"]) == 2 and all(v > 0 for v in sampled["per_layer"])
    # the same experiment for reuse: the error is how the run was watched, not what it made
    assert RunConfig(error="none").reuse_key() == RunConfig().reuse_key()


def test_the_cli_summary_says_not_measured() -> None:
    assert layer_error_line({"layer_error": {"mode": "none", "measured": False}}) == \
        "layer output error: not measured (--error none)"
    line = layer_error_line({"layer_error": {"measured": True, "windows": 2, "per_layer": [0.1, 0.3]}})
    assert "mean 0.2000" in line and "max 0.3000" in line and "on 2 calibration windows" in line
    assert layer_error_line({}) == ""  # a record from before the field


def test_the_run_view_figure_says_what_is_not_drawn(runs: dict[str, RunRecord]) -> None:
    view = fold(runs["none"].iter_events())
    assert view.layers_done and all(e.output_rel_error is None for e in view.layers_done)
    fig = figure(view, "layers")
    assert not fig.data  # no line, no zero line
    assert [a.text for a in fig.layout.annotations] == [f"layer output error not drawn: {NOT_DRAWN}"]
    drawn = figure(fold(runs["sample"].iter_events()), "layers")
    assert len(drawn.data) == 1 and all(y > 0 for y in drawn.data[0].y)


def test_the_comparison_overlay_names_the_run_it_does_not_draw(runs: dict[str, RunRecord]) -> None:
    both = overlay_runs([runs["sample"], runs["none"]])
    assert [r["layer_error_measured"] for r in both] == [True, False]
    fig = layer_overlay_figure(both, "layer_error")
    assert len(fig.data) == 1 and fig.data[0].name == both[0]["name"]
    (text,) = [a.text for a in fig.layout.annotations]
    assert both[1]["name"] in text and OVERLAY_NOT_DRAWN in text
    alone = layer_overlay_figure(overlay_runs([runs["none"]]), "layer_error")
    assert not alone.data and OVERLAY_NOT_DRAWN in alone.layout.annotations[0].text


def test_the_lesson_figure_names_the_run_it_does_not_draw() -> None:
    from toolkit.teach.figures import layer_errors_figure
    from toolkit.teach.lesson_view import MethodMaterial

    def material(method: str, error: float | None) -> MethodMaterial:
        done = LayerDone(layer=0, num_layers=1, output_rel_error=error, seconds=1.0)
        return MethodMaterial(method=method, run_id=method, layers=[done], num_layers=1)

    measured, unmeasured = material("wanda", 0.2), material("sparsegpt", None)
    fig = layer_errors_figure([measured, unmeasured])
    assert [t.name for t in fig.data] == [measured.label]
    assert unmeasured.label in fig.layout.annotations[0].text and "--error none" in fig.layout.annotations[0].text


def test_an_unknown_error_mode_is_one_line_before_any_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ToolkitError, match=r"unknown --error 'all': use one of sample, none"):
        RunConfig(model="tiny-llama", error="all")
    with pytest.raises(SystemExit) as exit_info:
        main(["prune", *TINY, "--error", "all", "--out", str(tmp_path / "runs")])
    assert exit_info.value.code == 2
    assert "invalid choice: 'all'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
