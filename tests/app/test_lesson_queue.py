"""The Lesson's missing runs wait in the device queue the Run and Sweep tabs use: one pruning at a time."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import toolkit.methods as methods
from app import forms, lesson_tab
from app.jobs import device_queue
from app.lesson_tab import lesson_stream
from app.run_tab import run_stream
from tests.helpers.gate import Gate
from tests.teach.test_lesson import stored_lesson_run
from toolkit.api import CancelToken, device_slot
from toolkit.store.runs import list_runs
from toolkit.teach import lesson


@pytest.fixture
def two_methods(monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    methods_run = ("magnitude", "wanda")
    monkeypatch.setattr(lesson, "METHODS", methods_run)
    monkeypatch.setattr(lesson_tab, "QUEUE_POLL", 0.01)
    return methods_run


def test_names_of_one_device_share_a_queue() -> None:
    assert device_slot(" CPU ") == "cpu" and device_slot("cuda") == device_slot("cuda:0") == "cuda:0"
    assert device_slot("auto") in ("cpu", "cuda:0")
    assert device_queue("auto") is device_queue(device_slot("auto"))


@pytest.mark.parametrize("how", ["cancel button", "page closed"])
def test_a_queued_lesson_shows_its_place_and_cancel_leaves_the_queue(tmp_path: Path, two_methods: tuple,
                                                                      how: str) -> None:
    line = device_queue("cpu")
    holder = line.join()
    assert line.try_start(holder)  # a run holds the device
    try:
        token = CancelToken()
        stream = lesson_stream("tiny-llama", str(tmp_path), token)
        assert "To run: magnitude" in next(stream)["plan"]
        waiting = [next(stream)["status"] for _ in range(3)]
        assert all(s.startswith("**… queued** · position 1 in line for device `auto`") for s in waiting), waiting
        assert not list(tmp_path.iterdir())  # nothing pruned while the device is held
        if how == "cancel button":
            token.cancel()
            (last,) = list(stream)
            assert last["status"] == "**■ lesson cancelled** while waiting in the queue; nothing was run."
        else:
            stream.close()  # what Gradio does on Cancel or a closed tab
        behind = line.join()
        line.leave(holder)
        assert line.try_start(behind)  # the lesson's place is gone: the next job is first in line
        line.leave(behind)
    finally:
        line.leave(holder)
    assert not list(tmp_path.iterdir())


def test_the_lesson_prunes_only_after_the_run_holding_the_device_ends(tmp_path: Path, two_methods: tuple,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(base="magnitude")  # the Run tab's run holds the device until the test opens the gate
    monkeypatch.setitem(methods.METHODS, gate.NAME, gate.spec)
    protocol = forms.Protocol(nsamples=4, seqlen=32, eval_seqlen=32, eval_windows=2, device="cpu")
    settings = forms.RunSettings(model="tiny-llama", method=gate.NAME, protocol=protocol)
    run_dir, lesson_dir = tmp_path / "run", tmp_path / "lesson"
    run_updates: list[dict] = []
    worker = threading.Thread(target=lambda: run_updates.extend(run_stream(settings, runs_dir=str(run_dir),
                                                                           session="lesson-queue")))
    safety = threading.Timer(120, gate.open)  # a lesson that never queues fails instead of hanging
    worker.start()
    safety.start()
    try:
        deadline = time.monotonic() + 60
        while not device_queue("cpu").busy and time.monotonic() < deadline:
            time.sleep(0.01)
        stream = lesson_stream("tiny-llama", str(lesson_dir))  # asks for device "auto": the same CPU
        next(stream)
        assert "position 1 in line" in next(stream)["status"]
        assert not lesson_dir.exists() or not list(lesson_dir.iterdir())
        gate.open()
        started_after_run: list[bool] = []
        updates = []
        for update in stream:
            if update.get("status", "").startswith("**▶ magnitude (1 of 2 to run)") and not started_after_run:
                started_after_run.append([r.status for r in list_runs(run_dir)] == ["finished"])
            updates.append(update)
    finally:
        gate.open()
        safety.cancel()
        worker.join(60)
    assert started_after_run == [True]  # the lesson's first run began after the run on the device finished
    assert "✓ finished" in run_updates[-1]["status"]
    assert updates[-1]["status"].startswith("**✓ lesson ready**") and "2 runs" in updates[-1]["status"]
    assert not device_queue("cpu").busy


def test_runs_whose_masks_cannot_be_compared_end_in_one_error_line(tmp_path: Path, two_methods: tuple) -> None:
    shapes = ({"mlp.down_proj": (16, 8)}, {"mlp.down_proj": (8, 16)})
    for config, shape in zip(lesson.lesson_configs("tiny-llama", str(tmp_path), lesson.METHODS), shapes, strict=True):
        stored_lesson_run(tmp_path, config.to_dict(), shapes=shape)
    *_, last = lesson_stream("tiny-llama", str(tmp_path))
    assert last["status"].startswith("**⚠ error:** masks have different shapes") and "walkthrough" not in last
