"""A recovery's events folded into a RecoveryView (toolkit/live/recovery.py), by hand."""

from __future__ import annotations

import math

from toolkit.events import EvalPoint, RecoveryStep, RunFailed, RunFinished, RunStarted
from toolkit.live.recovery import RecoveryView, fold_recovery

STARTED = RunStarted(run_id="r2", model="tiny-llama", method="recover", sparsity="50%",
                     options={"parent": "r1", "steps": 3}, protocol={}, num_layers=2, linears=[], device="cpu")


def _eval(which: str, ppl: float) -> EvalPoint:
    return EvalPoint(dataset="wiki", which=which, ppl=ppl, seq_len=32, windows=2, tokens=64)


def test_a_finished_recovery_folds_into_its_curve_and_perplexities() -> None:
    steps = [RecoveryStep(step=i, loss=5.0 - i, lr=1e-3) for i in (1, 2, 3)]
    view = fold_recovery([STARTED, _eval("pruned", 40.0), *steps, _eval("recovered", 30.0),
                          RunFinished(achieved_sparsity=0.5, prune_seconds=2.5, ppl={"wiki": 30.0}, dense_ppl={})])
    assert (view.status, view.run_id, view.parent, view.steps, view.step) == ("finished", "r2", "r1", 3, 3)
    assert view.losses == [4.0, 3.0, 2.0] and view.step_numbers == [1, 2, 3]
    assert view.result_rows() == [("wiki", 40.0, 30.0)] and view.train_seconds == 2.5
    assert view.status_line() == "finished · recover run r1 (50%) · step 3 of 3 · loss 2.0000"


def test_a_running_and_a_cancelled_recovery_say_where_they_are() -> None:
    view = RecoveryView()
    assert "Recover" in view.status_line()
    view.apply(STARTED)
    assert view.status_line().endswith("evaluating before")
    view.apply(RecoveryStep(step=1, loss=4.5, lr=1e-4))
    assert "step 1 of 3 · loss 4.5000" in view.status_line()
    (name, before, after), = view.apply(_eval("pruned", 40.0)).result_rows()
    assert name == "wiki" and before == 40.0 and math.isnan(after)
    view.apply(RunFailed(error="recovery cancelled; run r1 and its model are unchanged", cancelled=True))
    assert view.status == "cancelled" and view.status_line().startswith("cancelled: recovery cancelled")


def test_a_recovery_folded_at_stamps_keeps_its_elapsed_time_and_training_data() -> None:
    protocol = {"calibration": {"source": "wiki", "nsamples": 12, "seqlen": 32, "seed": 0},
                "model_label": "tiny-llama after wanda 50% (run r1)"}
    started = RunStarted(run_id="r2", model="tiny-llama", method="recover", sparsity="50%",
                         options={"parent": "r1", "steps": 1}, protocol=protocol, num_layers=2, linears=[],
                         device="cpu")
    end = RunFinished(achieved_sparsity=0.5, prune_seconds=27.9, ppl={}, dense_ppl={})
    view = fold_recovery([started, RecoveryStep(step=1, loss=3.0, lr=1e-4), end], times=[2.0, 20.0, 45.0])
    assert view.elapsed(math.nan) == 43.0 and view.train_seconds == 27.9
    assert view.calibration["nsamples"] == 12 and view.model == protocol["model_label"]
    assert math.isnan(fold_recovery([started, end]).elapsed(math.nan))  # no clock: unknown, not the training time
