"""Recovery fine-tuning of a saved run (toolkit/run/recover.py, toolkit/api.py recover_model) on tiny models.

A recovery is a new run linked to its parent; the parent's folder is never written; every pruned weight is
exactly 0 in the saved checkpoint; bad input is one line before any work; a cancel leaves nothing half-written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.recovery import fingerprint, parent_run, pruned_nonzero
from toolkit.api import CancelToken, recover_model
from toolkit.cli.main import main
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import EvalPoint, RecoveryStep, RunFailed, RunFinished, RunStarted
from toolkit.run import recover as recover_module
from toolkit.run import recover_train as recover_train_module
from toolkit.store.runs import list_runs, open_run

QUICK = {"steps": 4, "lr": 1e-2}


def _recover(store: Path, **settings: object) -> dict:
    (folder,) = [p for p in store.iterdir() if "wanda" in p.name]
    return recover_model(run=folder, **{**QUICK, **settings})


def _cli(argv: list[str]) -> int:
    return main(["recover", *argv])


def test_recovery_is_a_new_run_linked_to_its_parent_with_the_masks_kept(store: Path) -> None:
    (folder,) = list(store.iterdir())
    before = fingerprint(folder)
    events: list = []
    result = recover_model(run=folder, on_event=events.append, **QUICK)
    assert fingerprint(folder) == before  # the parent's folder, model included, is byte for byte unchanged
    child = open_run(result["run_dir"])
    assert child.path.parent == store and child.status == "finished" and child.run_id != folder.name
    config = json.loads((child.path / "config.json").read_text())
    assert config["method"] == "recover" and config["parent"] == folder.name
    assert (config["steps"], config["rank"], config["alpha"], config["lr"], config["seed"]) == (4, 8, 16.0, 1e-2, 0)
    assert config["compression"]["label"] == "50%" and child.label == "50%"
    assert len(child.mask_names()) == 14 and result["masks"] == 14
    assert pruned_nonzero(child.path / "model", folder) == (0, pruned_nonzero(folder / "model", folder)[1])
    assert pruned_nonzero(child.path / "model", folder)[1] > 0
    parent_ppl = open_run(folder).result["ppl"]["wiki"]
    assert result["ppl_before"]["wiki"] == parent_ppl  # the parent's record on the same windows, not measured again
    assert "eval_before_from_parent" in result["seconds"] and "eval_before" not in result["seconds"]
    assert 0 < result["ppl"]["wiki"] < result["ppl_before"]["wiki"]
    assert len(result["loss"]) == 4 and result["achieved_sparsity"] == pytest.approx(0.5)
    assert result["options"]["batch_size"] == 16  # about 512 tokens a step: 512 // 32 windows
    kinds = [type(e) for e in events]
    assert kinds[0] is RunStarted and kinds[-1] is RunFinished and kinds.count(RecoveryStep) == 4
    assert [e.which for e in events if isinstance(e, EvalPoint)] == ["pruned", "recovered"]
    assert [type(e) for e in child.events()] == kinds  # the store replays every event


def test_a_recovered_run_can_be_recovered_again(store: Path) -> None:
    first = _recover(store, steps=2)
    second = recover_model(run=first["run_dir"], steps=2, lr=1e-2)
    (parent_folder,) = [p for p in store.iterdir() if "wanda" in p.name]
    assert second["parent"] == first["run_id"]
    assert second["ppl_before"]["wiki"] == pytest.approx(first["ppl"]["wiki"], rel=1e-4)
    assert pruned_nonzero(Path(second["run_dir"]) / "model", parent_folder)[0] == 0


def test_eval_windows_shortens_the_evaluation(store: Path) -> None:
    result = _recover(store, steps=1, eval_windows=1)
    assert result["protocol"]["evaluation"]["windows"] == 1
    assert "eval_before" in result["seconds"]  # other windows than the parent's record: measured


@pytest.mark.parametrize(("make", "message"), [
    (lambda store: store / "missing", "is not a run folder (no such folder)"),
    (lambda store: store, "is not a run folder (it has no config.json)"),
])
def test_a_folder_that_is_not_a_run_is_refused(store: Path, make: object, message: str) -> None:
    with pytest.raises(ToolkitError, match=message.replace("(", r"\(").replace(")", r"\)")):
        recover_model(run=make(store), **QUICK)  # type: ignore[operator]
    assert len(list_runs(store)) == 1


def test_a_run_without_a_saved_model_is_refused(store: Path) -> None:
    (folder,) = list(store.iterdir())
    shutil.rmtree(folder / "model")
    with pytest.raises(ToolkitError, match="saved no model: re-run prune with --save-model"):
        recover_model(run=folder, **QUICK)
    assert len(list_runs(store)) == 1


def test_a_quantized_run_is_refused(store: Path) -> None:
    (folder,) = list(store.iterdir())
    config = json.loads((folder / "config.json").read_text())
    config["quant"] = "int4:g128"
    config["compression"]["quant"] = {"label": "int4:g128", "bits": 4, "group_size": 128, "symmetric": False}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ToolkitError, match=r"is quantized \(int4:g128\): recovery supports sparse or shrunk float "
                                           "runs"):
        recover_model(run=folder, **QUICK)
    assert len(list_runs(store)) == 1


def test_a_rank_larger_than_a_linear_is_refused_before_any_work(store: Path) -> None:
    with pytest.raises(ToolkitError, match=r"--rank 33 is larger than min\(out, in\) = 32 of layer 0 "
                                           "self_attn.k_proj"):
        _recover(store, rank=33)
    assert len(list_runs(store)) == 1


@pytest.mark.parametrize(("setting", "message"), [
    ({"steps": 0}, "--steps must be a whole number ≥ 1, got 0"),
    ({"lr": -1.0}, "--lr must be a number > 0"),
    ({"eval_windows": 0}, "--eval-windows must be ≥ 1"),
    ({"ranks": 4}, "unknown recovery setting 'ranks'"),
])
def test_bad_settings_are_refused_before_any_work(store: Path, setting: dict, message: str) -> None:
    with pytest.raises(ToolkitError, match=message):
        _recover(store, **setting)
    assert len(list_runs(store)) == 1


def test_cancel_mid_recovery_leaves_the_parent_and_marks_the_new_run(store: Path) -> None:
    (folder,) = list(store.iterdir())
    before = fingerprint(folder)
    token, steps = CancelToken(), []

    def on_event(event: object) -> None:
        if isinstance(event, RecoveryStep):
            steps.append(event.step)
            if event.step == 2:
                token.cancel()

    with pytest.raises(RunCancelled, match=f"recovery cancelled; run {folder.name} and its model are unchanged"):
        recover_model(run=folder, on_event=on_event, cancel=token, steps=6)
    assert steps == [1, 2] and fingerprint(folder) == before
    (child,) = [r for r in list_runs(store) if r.run_id != folder.name]
    assert child.status == "cancelled" and child.result is None
    assert not any((child.path / name).exists() for name in ("model", "model.partial", "result.json"))
    last = child.events()[-1]
    assert isinstance(last, RunFailed) and last.cancelled


def test_an_interrupted_save_leaves_no_half_written_model(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(model: object, codec: object, folder: Path) -> Path:
        (folder / "half").mkdir(parents=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(recover_module, "save_shrunk", interrupted)
    with pytest.raises(RunCancelled):
        _recover(store, steps=1)
    (child,) = [r for r in list_runs(store) if r.config.get("method") == "recover"]
    assert child.status == "cancelled"
    assert not any((child.path / name).exists() for name in ("model", "model.partial", "result.json"))


def test_a_failed_evaluation_after_keeps_the_saved_recovery(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def perplexity(*args: object, **kwargs: object) -> float:
        calls.append(1)
        raise RuntimeError("NaN logits")  # the only measured evaluation: the one after (before is the parent's)

    monkeypatch.setattr(recover_module, "perplexity", perplexity)
    with pytest.raises(RuntimeError, match="NaN logits"):
        _recover(store, steps=1)
    (child,) = [r for r in list_runs(store) if r.config.get("method") == "recover"]
    (parent,) = [r for r in list_runs(store) if r.config.get("method") != "recover"]
    assert child.status == "failed" and "the recovered model is saved in" in child.error and calls == [1]
    assert (child.path / "model" / "config.json").is_file() and child.result is not None
    assert child.result["ppl_before"] == parent.result["ppl"] and child.result["ppl"] == {}


def test_a_structured_run_recovers_with_its_shapes(tmp_path: Path) -> None:
    folder = parent_run(tmp_path, method="flap", sparsity="structured:30%", eval_windows=1)
    result = recover_model(run=folder, steps=2, lr=1e-2)
    assert (Path(result["run_dir"]) / "model" / "prunelab_structure.json").is_file()
    assert result["ppl"]["wiki"] > 0 and result["protocol"]["parent"]["masks"] == "nonzero pattern"


def test_the_cli_prints_the_perplexity_before_and_after(store: Path, capsys: pytest.CaptureFixture) -> None:
    (folder,) = list(store.iterdir())
    assert _cli([str(folder), "--steps", "2", "--lr", "0.01", "--json", str(store / "out.json")]) == 0
    out = capsys.readouterr().out
    assert f"recovered run {folder.name} (wanda 50%): 2 steps × 16 windows of 32 tokens, rank 8" in out
    assert "ppl (wiki, 2 × 32 tokens): before " in out and " → after " in out
    assert json.loads((store / "out.json").read_text())["parent"] == folder.name


@pytest.mark.parametrize(("args", "message"), [
    (["--steps", "0"], "error: --steps must be a whole number ≥ 1, got 0"),
    (["--rank", "33"], "error: --rank 33 is larger than min(out, in) = 32 of layer 0 self_attn.k_proj (32×64): "
                       "use --rank ≤ 32"),
])
def test_the_cli_refuses_bad_input_with_one_line(store: Path, capsys: pytest.CaptureFixture, args: list[str],
                                                 message: str) -> None:
    (folder,) = list(store.iterdir())
    assert _cli([str(folder), *args]) == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("error")] == [message] and "Traceback" not in err
    assert len(list_runs(store)) == 1


def test_ctrl_c_in_the_cli_marks_the_new_run_cancelled(store: Path, capsys: pytest.CaptureFixture,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (folder,) = list(store.iterdir())
    before = fingerprint(folder)

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(recover_train_module, "train", interrupted)
    assert _cli([str(folder), "--steps", "2"]) == 130
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("cancelled")]
    assert err == [f"cancelled: recovery cancelled; run {folder.name} and its model are unchanged; "
                   "the run is marked cancelled"]
    (child,) = [r for r in list_runs(store) if r.run_id != folder.name]
    assert child.status == "cancelled" and fingerprint(folder) == before


@pytest.mark.slow
def test_the_embedded_model_recovers_with_its_masks_kept(tmp_path: Path) -> None:
    folder = parent_run(tmp_path, model="smollm2-135m", nsamples=4, seqlen=64, eval_seqlen=64)
    result = recover_model(run=folder, steps=3, batch_size=1)
    assert pruned_nonzero(Path(result["run_dir"]) / "model", folder)[0] == 0
    assert 0 < result["ppl"]["wiki"] < 10 * result["ppl_before"]["wiki"]
