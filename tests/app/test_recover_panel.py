"""The Runs tab's Recover panel (app/recover_panel.py) driven through its handler on a tiny saved run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.recover_panel import cancel_message, recover_stream
from tests.helpers.recovery import parent_fixture, store_fixture  # noqa: F401 - the shared fixtures (a saved tiny run, a store)
from toolkit.store.runs import list_runs


def test_recover_streams_the_loss_and_ends_with_before_and_after(store: Path, parent: Path) -> None:
    updates = list(recover_stream(parent.name, 3, runs_dir=str(store), session="panel-ok"))
    final = updates[-1]
    assert "✓ finished" in final["status"] and "step 3 of 3" in final["status"]
    assert "| perplexity (wiki) |" in final["result"] and f"parent `{parent.name}`" in final["result"]
    assert list(final["loss"].data[0].x) == [1, 2, 3] and "→" in final["loss"].layout.title.text
    assert "notice" not in final
    for update in updates:  # never the picker's hint: a started recovery says that it is starting
        assert "Pick a finished run" not in update["status"] and not update["status"].startswith("** "), update
    child = [r for r in list_runs(store) if r.config.get("method") == "recover"]
    assert len(child) == 1 and child[0].status == "finished"


@pytest.mark.parametrize(("run_id", "steps", "message"), [
    ("", 3, "pick a run first"),
    ("x", 0, "steps must be a whole number ≥ 1, got 0"),
    ("x", "many", "steps must be a whole number ≥ 1, got 'many'"),
])
def test_bad_input_is_a_message_before_any_work(store: Path, run_id: str, steps: object, message: str) -> None:
    (update,) = recover_stream(run_id, steps, runs_dir=str(store), session="panel-bad")
    assert message in update["status"] and update["status"].startswith("**⚠") and "notice" not in update
    assert len(list_runs(store)) == 1


def test_a_run_without_a_model_is_refused_with_what_to_do(store: Path, parent: Path) -> None:
    shutil.rmtree(store / parent.name / "model")
    final = list(recover_stream(parent.name, 3, runs_dir=str(store), session="panel-nomodel"))[-1]
    assert 'run again with "Save the pruned checkpoint" ticked' in final["status"] and "⚠" in final["status"]
    assert "--save-model" not in final["status"] and "notice" not in final  # the page's words, one message


def test_cancel_stops_the_recovery_and_marks_the_new_run(store: Path, parent: Path) -> None:
    said = ""
    stream = recover_stream(parent.name, 400, runs_dir=str(store), session="panel-cancel")
    updates = []
    for update in stream:
        updates.append(update)
        if not said and "step " in update.get("status", ""):
            said = cancel_message("panel-cancel", str(store))
    assert "is marked **cancelled**; its parent run is unchanged" in said
    assert "■ cancelled" in updates[-1]["status"]
    (child,) = [r for r in list_runs(store) if r.config.get("method") == "recover"]
    assert child.status == "cancelled" and not (child.path / "model").exists()
    assert cancel_message("panel-nothing", str(store)).startswith("Nothing to cancel")


def test_a_finished_recovery_shows_its_warnings_instead_of_claiming_the_masks_kept() -> None:
    from app.recover_panel import result_markdown
    from toolkit.live.recovery import RecoveryView

    view = RecoveryView(status="finished", run_id="r2", parent="r1", label="50%", ppl_before={"wiki": 30.0},
                        ppl_after={"wiki": 25.0}, train_seconds=1.0)
    assert "the masks kept" in result_markdown(view) and "⚠" not in result_markdown(view)
    view.warnings.append("the stored keep-masks keep 2,048 weights that are exactly 0 in the saved model")
    text = result_markdown(view)
    assert "the masks kept)" not in text and "see the warnings below" in text
    assert "⚠ the stored keep-masks keep 2,048 weights" in text


def test_the_full_choice_trains_the_linears_and_is_recorded(store: Path, parent: Path) -> None:
    final = list(recover_stream(parent.name, 2, runs_dir=str(store), session="panel-full", train="full"))[-1]
    assert "✓ finished" in final["status"]
    (child,) = [r for r in list_runs(store) if r.config.get("method") == "recover"]
    assert child.config["train"] == "full" and child.result["options"]["train"] == "full"


def test_an_unknown_training_is_a_message_before_any_work(store: Path, parent: Path) -> None:
    (update,) = recover_stream(parent.name, 2, runs_dir=str(store), session="panel-bogus", train="bogus")
    assert "unknown training 'bogus': pick lora or full" in update["status"] and len(list_runs(store)) == 1


def test_the_replay_and_the_curve_say_which_training_ran() -> None:
    from app.recover_panel import training_line
    from toolkit.figures.recovery import recovery_figure
    from toolkit.live.recovery import RecoveryView

    full = {"train": "full", "batch_size": 4, "lr": 5e-05, "trainable": 1234}
    lora = {"train": "lora", "batch_size": 1, "rank": 8, "alpha": 16.0, "lr": 0.0005, "trainable": 99}
    assert training_line(40, full) == ("\nFull fine-tune (the linears themselves, masks kept): 40 steps of 4 windows, "
                                       "lr 5e-05, 1,234 trainable weights")
    assert training_line(40, lora) == ("\nMasked LoRA: 40 steps of 1 window, rank 8, α 16.0, lr 0.0005, "
                                       "99 trainable weights")
    assert training_line(3, {}) == "\nMasked LoRA: 3 steps"
    view = RecoveryView()
    assert "masked LoRA" in recovery_figure(view).layout.title.text
    view.options = full
    assert "full fine-tune" in recovery_figure(view).layout.title.text
