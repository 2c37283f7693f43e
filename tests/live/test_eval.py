"""The live view during evaluation: status line per stage, accuracy table dense vs pruned, generations panel."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from app import forms, run_tab, views
from app.run_tab import run_stream
from toolkit.errors import ToolkitError
from toolkit.events import (
    EvalProgress,
    Generated,
    LayerStarted,
    RunFinished,
    RunStarted,
    TaskScore,
)
from toolkit.live.phase import progress_line
from toolkit.live.view import RunView

STARTED = RunStarted(run_id="r1", model="tiny-llama", method="wanda", sparsity="50%", options={},
                     protocol={"zero_shot": {"source": "local", "limit": 20}}, num_layers=2,
                     linears=["q_proj", "k_proj"], device="cpu")


def _score(which: str, task: str, metric: str, value: float, headline: bool) -> TaskScore:
    return TaskScore(which=which, task=task, metric=metric, value=value, examples=20, split="validation",
                     headline=headline)


def test_status_line_follows_each_evaluation_stage() -> None:
    view = RunView().apply(STARTED, 0.0)
    view.apply(EvalProgress(phase="dense", what="perplexity", done=4, total=16), 1.0)
    assert progress_line(view, 1.0).startswith("evaluating dense · window 4/16 · elapsed 1.0 s · estimating")
    assert view.bar_fraction == pytest.approx(0.25)
    view.apply(EvalProgress(phase="dense", what="perplexity", done=8, total=16), 3.0)
    assert "about 4 s left" in progress_line(view, 3.0)  # 4 windows in 2 s, 8 to go
    view.apply(EvalProgress(phase="dense", what="boolq", done=30, total=100), 4.0)
    assert progress_line(view, 4.0).startswith("zero-shot boolq (dense) · 30/100 requests · elapsed 4.0 s · estimating")
    view.apply(LayerStarted(layer=0, num_layers=2, groups=[]), 5.0)  # pruning: back to the layer line
    assert progress_line(view, 5.0).startswith("pruning layer 0 · 0 of 2 layers done") and view.bar_fraction == 0.0
    view.apply(EvalProgress(phase="pruned", what="perplexity", done=40, total=210), 6.0)
    assert "evaluating pruned · window 40/210" in views.status_markdown(view, 6.0)
    view.apply(EvalProgress(phase="pruned", what="generation", done=2, total=5), 7.0)
    assert progress_line(view, 7.0).startswith("generating pruned · prompt 2/5")
    view.apply(EvalProgress(phase="pruned", what="speed", done=0, total=1), 7.5)  # a shrunk model being timed
    assert progress_line(view, 7.5).startswith("measuring the pruned model's decode speed (tokens/s)")
    view.apply(RunFinished(achieved_sparsity=0.5, prune_seconds=1.0, ppl={}, dense_ppl={}), 8.0)
    assert not view.evaluating and progress_line(view, 8.0).endswith("finished")


def test_accuracy_table_dense_vs_pruned_and_mean() -> None:
    view = RunView().apply(STARTED, 0.0)
    for event in (_score("dense", "boolq", "acc", 0.6, True), _score("dense", "arc_easy", "acc", 0.5, False),
                  _score("dense", "arc_easy", "acc_norm", 0.4, True), _score("pruned", "boolq", "acc", 0.55, True),
                  _score("pruned", "arc_easy", "acc", 0.45, False), _score("pruned", "arc_easy", "acc_norm", 0.3, True),
                  RunFinished(achieved_sparsity=0.5, prune_seconds=1.0, ppl={}, dense_ppl={})):
        view.apply(event, 1.0)
    rows = view.evals.accuracy_rows()
    assert [(r.task, r.metric, r.dense, r.pruned) for r in rows] == [("boolq", "acc", 0.6, 0.55),
                                                                     ("arc_easy", "acc_norm", 0.4, 0.3)]
    assert view.evals.mean("dense") == pytest.approx(0.5) and view.evals.mean("pruned") == pytest.approx(0.425)
    table = views.result_markdown(view)
    assert "first 20 examples per task; data: local" in table
    assert "| boolq | validation | acc | 20 | 0.6000 | 0.5500 | -0.0500 |" in table
    assert "| **mean** | | | | 0.5000 | 0.4250 | -0.0750 |" in table


def test_no_tasks_no_accuracy_table_and_a_missing_pruned_score_is_a_dash() -> None:
    view = RunView().apply(STARTED, 0.0)
    view.apply(RunFinished(achieved_sparsity=0.5, prune_seconds=1.0, ppl={}, dense_ppl={}), 1.0)
    assert "Zero-shot" not in views.result_markdown(view)
    view.apply(_score("dense", "rte", "acc", 0.5, True), 1.0)
    assert math.isnan(view.evals.mean("pruned")) and "| rte | validation | acc | 20 | 0.5000 | – | – |" in \
        views.result_markdown(view)


def test_generations_panel_side_by_side_with_speed() -> None:
    view = RunView().apply(STARTED, 0.0)
    assert views.generations_html(view) == ""
    view.apply(Generated(which="dense", prompt="1 < 2", text="dense <b>text</b>", new_tokens=10, seconds=0.5), 1.0)
    html = views.generations_html(view)
    assert "dense &lt;b&gt;text&lt;/b&gt;" in html and "20.0 tokens/s" in html and "…" in html  # pruned pending
    view.apply(Generated(which="pruned", prompt="1 < 2", text="pruned text", new_tokens=8, seconds=0.5), 2.0)
    html = views.generations_html(view)
    assert html.index("dense &lt;b&gt;") < html.index("pruned text") and "16.0 tokens/s" in html
    assert "<b>1 &lt; 2</b>" in html


def test_run_stream_with_tasks_and_generations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("PRUNELAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(run_tab, "PERIOD", 0.01)
    protocol = forms.Protocol(nsamples=2, seqlen=32, eval_seqlen=32, eval_windows=2, device="cpu",
                              tasks=["rte"], task_limit=2)
    settings = forms.RunSettings(model="tiny-llama", method="wanda", protocol=protocol, generate=True)
    updates = list(run_stream(settings, runs_dir=str(tmp_path / "runs"), session="zs"))
    final = updates[-1]
    assert "✓ finished" in final["status"]
    assert "| rte | validation | acc | 2 |" in final["result"] and "**mean**" in final["result"]
    assert final["generations"].count("tokens/s") == 10  # five prompts, dense and pruned


@pytest.mark.parametrize(("fields", "message"), [
    ({"tasks": ["rte", "hellaswg"]}, "Did you mean: hellaswag"),
    ({"tasks": ["rte"], "task_limit": -1}, "examples per task must be a whole number ≥ 0"),
])
def test_bad_task_fields_are_messages(fields: dict, message: str) -> None:
    protocol = forms.Protocol(device="cpu", **fields)
    with pytest.raises(ToolkitError, match=message):
        forms.to_config(forms.RunSettings(model="tiny-llama", protocol=protocol), "runs")


def test_task_limit_zero_means_all_and_no_tasks_means_none() -> None:
    config = forms.to_config(forms.RunSettings(model="tiny-llama", protocol=forms.Protocol(tasks=["rte"],
                                                                                           task_limit=0)), "runs")
    assert config.tasks == ("rte",) and config.task_limit is None
    assert forms.to_config(forms.RunSettings(model="tiny-llama"), "runs").tasks == ()


def test_sweep_plots_mean_accuracy_beside_perplexity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app import sweep_tab

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("PRUNELAB_CACHE", str(tmp_path / "cache"))
    protocol = forms.Protocol(nsamples=2, seqlen=32, eval_seqlen=32, eval_windows=2, device="cpu",
                              tasks=["rte"], task_limit=2)
    sweep = sweep_tab.SweepSettings(model="tiny-llama", methods=["magnitude"], sparsities=["30%", "50%"],
                                    protocol=protocol)
    final = list(sweep_tab.sweep_stream(sweep, runs_dir=str(tmp_path / "runs"), session="sa"))[-1]
    assert "2 of 2 points" in final["status"]
    (line, dense) = final["accuracy"].data
    assert line.name == "magnitude" and len(line.y) == 2 and all(0 <= y <= 1 for y in line.y)
    assert dense.name.startswith("dense (")
    again = list(sweep_tab.sweep_stream(sweep, runs_dir=str(tmp_path / "runs"), session="sa"))[-1]
    assert "2 reused" in again["status"] and list(again["accuracy"].data[0].y) == list(line.y)
    no_tasks = sweep_tab.SweepSettings(model="tiny-llama", methods=["magnitude"], sparsities=["50%"],
                                       protocol=forms.Protocol(nsamples=2, seqlen=32, eval_seqlen=32,
                                                               eval_windows=2, device="cpu"))
    plain = list(sweep_tab.sweep_stream(no_tasks, runs_dir=str(tmp_path / "runs"), session="sa"))[-1]
    assert "1 reused" in plain["status"]  # a run that also scored tasks measured the same perplexity
    fresh = list(sweep_tab.sweep_stream(no_tasks, runs_dir=str(tmp_path / "other"), session="sa"))[-1]
    assert "0 reused" in fresh["status"] and "accuracy" not in fresh
