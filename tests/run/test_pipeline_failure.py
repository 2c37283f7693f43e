"""A failed or cancelled step after the compression never loses it: masks, checkpoint and result.json stay."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.api import RunConfig, prune_model
from toolkit.cli.main import main
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import RunFailed
from toolkit.run import pipeline
from toolkit.store.runs import list_runs

FAST = {"model": "tiny-llama", "nsamples": 2, "seqlen": 32, "eval_seqlen": 32, "eval_windows": 2}


def _failing_eval(exc: BaseException):
    """A perplexity that raises ``exc``: without eval_dense the pruned model is the only one evaluated."""

    def evaluate(*args: object) -> float:
        raise exc
    return evaluate


def test_evaluation_error_keeps_the_pruning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "_eval", _failing_eval(IndexError("index out of range in self")))
    config = RunConfig(**FAST, out_dir=str(tmp_path), save_model=True)
    with pytest.raises(ToolkitError, match="evaluation failed after the compression finished"):
        prune_model(config)
    (record,) = list_runs(tmp_path)
    assert record.status == "failed"
    assert "evaluation failed" in record.error and "IndexError: index out of range" in record.error
    assert "the masks and the model are saved" in record.error
    assert record.result is not None and record.result["ppl"] == {}
    assert record.result["masks"] == len(record.mask_names()) == 14  # 2 layers × 7 linears
    assert (record.path / "model" / "config.json").is_file()
    last = record.events()[-1]
    assert isinstance(last, RunFailed) and not last.cancelled and "evaluation failed" in last.error


def test_cancel_during_evaluation_keeps_the_pruning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "_eval", _failing_eval(RunCancelled()))
    with pytest.raises(RunCancelled):
        prune_model(RunConfig(**FAST, out_dir=str(tmp_path)))
    (record,) = list_runs(tmp_path)
    assert record.status == "cancelled" and record.result is not None and len(record.mask_names()) == 14


def test_cli_says_what_failed_and_where_the_pruning_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(pipeline, "_eval", _failing_eval(RuntimeError("NaN logits")))
    argv = ["prune", "--model", "tiny-llama", "--nsamples", "2", "--seqlen", "32", "--eval-seqlen", "32",
            "--eval-windows", "2", "--out", str(tmp_path)]
    assert main(argv) == 1  # a library failed a recorded run: docs/cli.md's exit 1, not the input's 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    (record,) = list_runs(tmp_path)
    assert err == [f"error: {record.error}"] and str(record.path) in err[0]


def test_ctrl_c_during_the_pruned_perplexity_says_the_pruning_is_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(pipeline, "_eval", _failing_eval(KeyboardInterrupt()))
    argv = ["prune", "--model", "tiny-llama", "--nsamples", "2", "--seqlen", "32", "--eval-seqlen", "32",
            "--eval-windows", "2", "--out", str(tmp_path), "--save-model"]
    assert main(argv) == 130
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith(("cancelled", "error"))]
    (record,) = list_runs(tmp_path)
    assert err == [f"cancelled: evaluation cancelled after the compression finished; the masks and the model are "
                   f"saved in {record.path}; the run is marked cancelled"]
    assert "not changed" not in err[0]
    assert record.status == "cancelled" and record.error in err[0] and len(record.mask_names()) == 14


def test_ctrl_c_before_the_compression_finished_names_the_cancelled_run(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "prune_layers", interrupted)
    assert main(["prune", "--model", "tiny-llama", "--nsamples", "2", "--seqlen", "32", "--eval", "none",
                 "--out", str(tmp_path)]) == 130
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith(("cancelled", "error"))]
    (record,) = list_runs(tmp_path)
    assert err == [f"cancelled: stopped during the compression, before the compression finished: no compressed "
                   f"model was kept and the source model was not changed (run record {record.path}); the run is "
                   "marked cancelled"]
    assert record.status == "cancelled" and record.result is None
