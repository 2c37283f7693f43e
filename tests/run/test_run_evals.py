"""Zero-shot and generations inside a run: dense (cached) and pruned, progress events, failures that keep the run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import toolkit.run.pipeline as pipeline
from toolkit.api import CancelToken, RunConfig, open_run, prune_model
from toolkit.cli.main import main
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import EvalProgress, Event, Generated, RunFailed, RunFinished, RunWarning, TaskScore
from toolkit.run.evals import ProgressEvents

TASKS = ("rte", "arc_easy")


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PRUNELAB_CACHE", str(tmp_path / "cache"))


def _config(tmp_path: Path, **changes: Any) -> RunConfig:
    base: dict[str, Any] = dict(model="tiny-llama", method="wanda", sparsity="50%", nsamples=2, seqlen=32,
                                eval_seqlen=32, eval_windows=4, eval_dense=True, device="cpu",
                                out_dir=str(tmp_path / "runs"), tasks=TASKS, task_limit=3, task_data="local")
    return RunConfig(**{**base, **changes})


def test_dense_and_pruned_zero_shot_in_the_result_with_the_dense_scores_cached(tmp_path: Path) -> None:
    events: list[Event] = []
    result = prune_model(_config(tmp_path, generate=True), on_event=events.append)
    entry = result["zero_shot"]
    assert set(entry["dense"]) == set(entry["pruned"]) == set(TASKS) and entry["limit"] == 3
    assert entry["mean"]["dense"] == pytest.approx(sum(entry["dense"].values()) / 2)
    assert entry["tasks"]["arc_easy"]["split"] == "validation" and entry["dense_cached"] == []
    assert entry["tasks"]["rte"]["examples"] == 3 and "error" not in entry
    stages = {(e.phase, e.what) for e in events if isinstance(e, EvalProgress)}
    assert stages == {(p, w) for p in ("dense", "pruned") for w in ("perplexity", "generation", *TASKS)}
    assert all(e.done <= e.total for e in events if isinstance(e, EvalProgress))
    headline = {(e.which, e.task): e.value for e in events if isinstance(e, TaskScore) and e.headline}
    assert headline == {(w, t): entry[w][t] for w in ("dense", "pruned") for t in TASKS}
    texts = [e for e in events if isinstance(e, Generated)]
    assert [e.which for e in texts] == ["dense"] * 5 + ["pruned"] * 5
    assert [r["pruned"] for r in result["generations"]["records"]] == [e.text for e in texts[5:]]
    record = open_run(result["run_dir"])
    assert record.status == "finished" and record.result is not None and record.result["zero_shot"] == entry
    stored = (Path(result["run_dir"]) / "events.jsonl").read_text()
    assert "EvalProgress" not in stored and stored.count('"TaskScore"') == 6  # rte: acc; arc_easy: acc, acc_norm

    again = prune_model(_config(tmp_path, sparsity="60%"))["zero_shot"]
    assert again["dense_cached"] == list(TASKS) and again["dense"] == entry["dense"]
    other = prune_model(_config(tmp_path, task_limit=2))["zero_shot"]
    assert other["dense_cached"] == [] and other["tasks"]["rte"]["examples"] == 2


def test_a_failed_pruned_evaluation_keeps_the_finished_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture) -> None:
    real = pipeline.score_tasks
    seen_result: list[bool] = []

    def failing(loaded: Any, specs: Any, limit: Any, device: Any, progress: Any, phase: str) -> Any:
        if phase == "pruned":
            seen_result.append(any(Path(tmp_path / "runs").glob("*/result.json")))
            raise RuntimeError("disk full")
        return real(loaded, specs, limit, device, progress, phase)

    monkeypatch.setattr(pipeline, "score_tasks", failing)
    out = tmp_path / "result.json"
    code = main(["prune", "--model", "tiny-llama", "--nsamples", "2", "--seqlen", "32", "--eval-seqlen", "32",
                 "--eval-windows", "2", "--device", "cpu", "--out", str(tmp_path / "runs"), "--tasks", "rte",
                 "--task-limit", "2", "--task-data", "local", "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 1 and seen_result == [True]  # result.json was on disk before the pruned evaluation
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "zero-shot of the pruned model failed: RuntimeError: disk full" in errors[0]
    data = json.loads(out.read_text())
    assert data["zero_shot"]["error"] == "RuntimeError: disk full" and data["zero_shot"]["pruned"] == {}
    assert data["zero_shot"]["dense"]["rte"] is not None and data["achieved_sparsity"] == pytest.approx(0.5)
    record = open_run(data["run_dir"])
    assert record.status == "finished" and record.result is not None and "error" in record.result["zero_shot"]
    kinds = [type(e) for e in record.events()]
    assert kinds[-2:] == [RunWarning, RunFinished]


def test_cancel_during_the_pruned_zero_shot_ends_cancelled_with_the_pruning_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real, token = pipeline.score_tasks, CancelToken()

    def cancel_then_score(loaded: Any, specs: Any, limit: Any, device: Any, progress: Any, phase: str) -> Any:
        if phase == "pruned":
            token.cancel()  # as the app's Cancel button: the first scored request stops the stage
        return real(loaded, specs, limit, device, progress, phase)

    monkeypatch.setattr(pipeline, "score_tasks", cancel_then_score)
    events: list[Event] = []
    with pytest.raises(RunCancelled, match="evaluation cancelled after the compression finished"):
        prune_model(_config(tmp_path, tasks=("rte",), generate=True), on_event=events.append, cancel=token)
    (record,) = [open_run(path) for path in (tmp_path / "runs").iterdir() if path.is_dir()]
    assert record.status == "cancelled" and "evaluation cancelled after the compression finished" in record.error
    assert record.result is not None and record.result["achieved_sparsity"] == pytest.approx(0.5)
    assert len(record.mask_names()) == 14  # the pruning stays
    entry = record.result["zero_shot"]
    assert entry["pruned"] == {} and entry["error"] == "cancelled before it completed" and "rte" in entry["dense"]
    assert record.result["generations"]["error"] == "cancelled before it completed"
    assert not any(isinstance(e, RunFinished) for e in events)
    last = record.events()[-1]
    assert isinstance(last, RunFailed) and last.cancelled


NO_SUCH_MODEL = ["prune", "--model", "no-such-model-anywhere"]  # loading it would fail: task checks come first


@pytest.mark.parametrize(("argv", "message"), [
    ([*NO_SUCH_MODEL, "--tasks", "boolq,hellaswg"], "Did you mean: hellaswag"),
    ([*NO_SUCH_MODEL, "--tasks", "mmlu"], "Known tasks: boolq, rte, hellaswag"),
    ([*NO_SUCH_MODEL, "--tasks", "rte", "--task-limit", "0"], "--task-limit must be ≥ 1"),
    ([*NO_SUCH_MODEL, "--task-limit", "5"], "give --tasks too"),
    ([*NO_SUCH_MODEL, "--tasks", "piqa", "--task-data", "local"], "no offline data for piqa"),
])
def test_prune_task_input_is_checked_before_the_model_loads(argv: list[str], message: str,
                                                            capsys: pytest.CaptureFixture) -> None:
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0]


def test_run_config_normalises_task_names_and_keeps_old_runs_reusable() -> None:
    config = RunConfig(model="tiny-llama", tasks="RTE, boolq", task_limit=5)  # type: ignore[arg-type]
    assert config.tasks == ("rte", "boolq") and config.to_dict()["tasks"] == ["rte", "boolq"]
    assert config.reuse_key()["tasks"] == ["rte", "boolq"] and config.reuse_key()["task_limit"] == 5
    assert "tasks" not in RunConfig(model="tiny-llama").reuse_key()
    with pytest.raises(ToolkitError, match="unknown task data source"):
        RunConfig(model="tiny-llama", tasks=("rte",), task_data="web")


def test_progress_events_are_one_per_percent_and_cancel() -> None:
    events: list[Event] = []
    stopped = [False]
    ticks = ProgressEvents(events.append, lambda stage, done, total: None, lambda: stopped[0])
    report = ticks.callback("pruned", "boolq")
    for done in range(1, 1001):
        report(done, 1000)
    assert len(events) == 101 and events[-1] == EvalProgress(phase="pruned", what="boolq", done=1000, total=1000)
    stopped[0] = True
    with pytest.raises(Exception, match="cancelled"):
        report(3, 1000)


def test_a_bos_family_without_bos_is_refused_before_the_run_is_recorded(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.evaluation.test_zeroshot import _NoSpecialTokens
    from toolkit.models.load import load_model

    gemma = load_model("tiny-gemma3")
    monkeypatch.setattr(pipeline, "load_model", lambda name, **kw: dataclasses.replace(gemma, codec=_NoSpecialTokens()))
    with pytest.raises(ToolkitError, match="need a BOS token"):
        prune_model(_config(tmp_path, model="tiny-gemma3", tasks=("rte",)))
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_generate_tokens_sets_the_new_tokens_of_the_runs_generations_and_leaves_reuse_alone(tmp_path: Path) -> None:
    events: list[Event] = []
    result = prune_model(_config(tmp_path, tasks=(), task_limit=None, generate=True, generate_tokens=3),
                         on_event=events.append)
    assert result["generations"]["max_new_tokens"] == 3
    texts = [e for e in events if isinstance(e, Generated)]
    assert len(texts) == 10 and all(1 <= e.new_tokens <= 3 for e in texts)
    assert any(e.new_tokens == 3 for e in texts)
    key = _config(tmp_path, generate_tokens=3).reuse_key()
    assert key == _config(tmp_path).reuse_key()  # the texts' length is not part of the experiment
    with pytest.raises(ToolkitError, match="--generate-tokens must be ≥ 1"):
        _config(tmp_path, generate_tokens=0)
