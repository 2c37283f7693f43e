"""The Lesson's stream draws while it runs: figures and a stage line with the time left before the lesson ends."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

import toolkit.methods as methods
from app import lesson_tab
from app.lesson_tab import lesson_stream
from tests.helpers.gate import Gate
from toolkit.teach import lesson


def filled_cells(figure) -> list[int]:
    """Cells with a value in each heat-map of a lesson figure."""
    return [sum(1 for row in trace.z for v in row if v is not None and not math.isnan(v)) for trace in figure.data]


def test_the_stream_yields_filled_figures_before_the_lesson_ends(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(base="magnitude")  # the second run waits before each linear until the test lets it go
    monkeypatch.setitem(methods.METHODS, gate.NAME, gate.spec)
    monkeypatch.setattr(lesson, "METHODS", ("magnitude", gate.NAME))
    monkeypatch.setattr(lesson_tab, "REDRAW", 0.0)
    safety = threading.Timer(240, gate.open)  # a stream that never reaches the gate fails instead of hanging
    safety.start()
    stream = lesson_stream("tiny-llama", str(tmp_path))
    first = next(stream)
    assert "heatmaps" in first and "progress" in first  # a figure (a note before any run) from the first update
    held = None
    try:
        gate.release(2)
        for update in stream:
            if "heatmaps" in update and filled_cells(update["heatmaps"]) == [14, 2]:
                held = update
                break
    finally:
        gate.open()
        safety.cancel()
    assert held is not None, "no update showed magnitude complete and the held run's first two linears"
    assert f"{gate.NAME} (2 of 2 to run) · pruning layer 1 of 2" in held["status"] and "left" in held["status"]
    assert "lesson-bar" in held["progress"]
    assert len(held["layers"].data) == 1 and held["layers"].data[0].name == "magnitude"  # the held run has no layer
    assert "lesson ready" not in held["status"]
    final = list(stream)[-1]
    assert final["status"].startswith("**✓ lesson ready**") and filled_cells(final["heatmaps"]) == [14, 14]
