"""The "Lesson for a class" table of docs/results.md: the ranking column and the reference profile each row used."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.results_lesson_class import render_lesson_class


def _record(**changes: object) -> dict:
    base = {"bench": "lesson_class", "model": "m", "wall_seconds": 240.0, "cpu_seconds": 200.0, "load_mean": 1.5,
            "load_max": 2.0, "cpus": 2, "seconds": {"magnitude": 40.0}, "dense_cache": "empty",
            "under_5_min": True, "reference_estimate": 300.0, "estimates": {}}
    return {**base, **changes}


def test_rows_rank_the_runs_by_perplexity_and_name_the_reference(tmp_path: Path) -> None:
    path = tmp_path / "cpu_lesson_class.jsonl"
    quiet = {"window": 2.2, "layer": {"magnitude": 0.48, "fista": 6.6}}
    busy = {"window": 15.7, "layer": {"magnitude": 4.2, "fista": 24.0}}
    records = [_record(reference=busy),
               _record(reference=quiet, ppl={"magnitude": 299.9, "fista": 35.3, "wanda": 40.7, "dense": 18.7})]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    text = "\n".join(render_lesson_class([path]))
    assert "fista 35.3 < wanda 40.7 < magnitude 299.9 (dense 18.7)" in text
    assert "a measured lesson (FISTAPruner layer 5.7 magnitude layers)" in text
    assert "two quiet lessons, in windows (FISTAPruner layer 3.0 windows)" in text
