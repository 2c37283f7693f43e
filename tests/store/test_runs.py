"""The run store: masks round-trip bit-packed, statuses, hand-edited records, the event generator."""

from __future__ import annotations

import json
import queue
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from toolkit import api
from toolkit.api import CancelToken, RunConfig, run
from toolkit.errors import ToolkitError
from toolkit.events import LayerDone, RunFailed, RunWarning
from toolkit.store.runs import RunWriter, list_runs, open_run


def test_mask_round_trip_and_statuses(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, {"method": "wanda", "sparsity": "50%"})
    keep = np.random.default_rng(0).random((7, 13)) > 0.5
    writer.mask(3, "mlp.up_proj", keep)
    writer.event(RunWarning(message="hello"))
    record = open_run(writer.path)
    assert record.status == "running" and record.result is None
    assert np.array_equal(record.load_mask(3, "mlp.up_proj"), keep)
    assert record.mask_names() == [(3, "mlp.up_proj")]
    writer.fail("cancelled", cancelled=True)
    assert open_run(writer.path).status == "cancelled"


def test_hand_edited_records(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, {"method": "wanda"})
    writer.event(RunWarning(message="ok"))
    writer.finish({"ppl": {}})
    with open(writer.path / "events.jsonl", "a") as handle:
        handle.write("{not json\n")
    events = open_run(writer.path).events()
    assert isinstance(events[-1], RunWarning) and "line 2" in events[-1].message
    (writer.path / "masks" / "L000__x.npz").write_bytes(b"garbage")
    with pytest.raises(ToolkitError, match="damaged"):
        open_run(writer.path).load_mask(0, "x")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{")
    assert {r.path: r.status for r in list_runs(tmp_path)} == {writer.path: "damaged", broken: "damaged"}
    assert "config.json is not valid JSON" in open_run(broken).error
    with pytest.raises(ToolkitError, match="not a run folder"):
        open_run(tmp_path / "missing")


def test_interrupted_run_detected(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, {"method": "wanda"})
    (writer.path / "status.json").write_text(json.dumps({"status": "running", "pid": 999999999}))
    assert open_run(writer.path).status == "interrupted"


def test_event_generator_cancel_marks_run_cancelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Lockstep: a one-slot event queue lets the worker run at most one event ahead of this loop, so the
    # cancel below lands before the last layer is done on any machine (with the unbounded queue a fast
    # worker could finish the run before the consumer saw the first LayerDone).
    monkeypatch.setattr(api, "queue", SimpleNamespace(Queue=lambda: queue.Queue(maxsize=1)))
    token = CancelToken()
    config = RunConfig(model="tiny-llama", nsamples=2, seqlen=32, eval_data=None, out_dir=str(tmp_path))
    kinds = []
    for event in run(config, token):
        kinds.append(event.kind)
        if isinstance(event, LayerDone):
            token.cancel()
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunFailed"
    (record,) = list_runs(tmp_path)
    assert record.status == "cancelled"
    last = record.events()[-1]
    assert isinstance(last, RunFailed) and last.cancelled


def test_event_generator_raises_bad_input_before_writing(tmp_path: Path) -> None:
    with pytest.raises(ToolkitError):
        list(run(RunConfig(model="no-such-model", out_dir=str(tmp_path))))
    assert list_runs(tmp_path) == []


def test_events_are_stamped_with_the_seconds_since_the_record_was_created(tmp_path: Path) -> None:
    """The stamps a replay folds at: increasing, from the record's creation; an older line has none (nan)."""
    writer = RunWriter(tmp_path, {"method": "wanda", "sparsity": "50%"})
    writer.event(RunWarning(message="first"))
    writer.event(RunWarning(message="second"))
    with open(writer.path / "events.jsonl", "a", encoding="utf-8") as handle:  # lines older code wrote, or a hand
        handle.write(json.dumps({"type": "Warning", "message": "old"}) + "\n")
        handle.write(json.dumps({"type": "Warning", "message": "odd", "at_s": "soon"}) + "\n")
    stamped = list(open_run(writer.path).timed_events())
    assert [event.message for _, event in stamped] == ["first", "second", "old", "odd"]  # type: ignore[attr-defined]
    first, second = stamped[0][0], stamped[1][0]
    assert 0.0 <= first <= second < 60.0
    assert all(np.isnan(at) for at, _ in stamped[2:])
    assert [e.message for e in open_run(writer.path).events()] == ["first", "second", "old", "odd"]  # type: ignore[attr-defined]
