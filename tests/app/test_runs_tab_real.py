"""Real tiny-llama runs replayed in the Runs tab: the elapsed time the live run showed, a recovery's own curve.

A pruning run is followed live (events folded at the consumer's clock, as the Run tab does) and
then replayed from its folder: the two elapsed times agree within the lag of one queue hand-over.
A recovery of a saved tiny run replays the loss of every step its result.json recorded.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import pytest

from app import runs_tab
from tests.helpers.recovery import parent_run
from toolkit.api import RunConfig, recover_model, run
from toolkit.live.view import RunView
from toolkit.store.runs import open_run

LAG = 0.5  # seconds: a consumer reads an event this long after the run wrote it, at most (a busy 2-core CPU)


def test_the_replay_shows_the_elapsed_time_the_live_run_showed(tmp_path: Path) -> None:
    config = RunConfig(model="tiny-llama", method="wanda", nsamples=2, seqlen=32, eval_seqlen=32, eval_windows=2,
                       out_dir=str(tmp_path))
    live = RunView()
    for event in run(config):
        live.apply(event, time.monotonic())
        time.sleep(0.02)  # a consumer slower than the run: the clock it shows still starts at RunStarted
    assert live.status == "finished" and math.isfinite(live.ended_at)
    (record,) = [open_run(path) for path in tmp_path.iterdir()]
    update = runs_tab.replay_view(record.run_id, str(tmp_path))
    found = re.search(r"elapsed (\d+\.\d) s", update["status"])
    assert found, update["status"]
    assert float(found.group(1)) == pytest.approx(live.elapsed(math.nan), abs=LAG + 0.05)
    stamps = [at for at, _ in record.timed_events()]
    assert found.group(1) == f"{stamps[-1] - stamps[0]:.1f}"  # RunStarted to RunFinished on the store's stamps
    assert stamps[-1] - stamps[0] > live.prune_seconds  # not the prune time: it counts the evaluations too


def test_a_real_recovery_replays_the_loss_of_every_step(tmp_path: Path) -> None:
    parent = parent_run(tmp_path)
    result = recover_model(run=parent, steps=3)
    update = runs_tab.replay_view(result["run_id"], str(tmp_path))
    assert {name for name, show in update["visible"].items() if show} == {"loss"}
    assert list(update["loss"].data[0].y) == pytest.approx(result["loss"])
    assert update["parent"] == parent.name and "✓ finished" in update["status"]
    before, after = result["ppl_before"]["wiki"], result["ppl"]["wiki"]
    assert f"| {before:.3f} | {after:.3f} |" in update["result"]
