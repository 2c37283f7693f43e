"""docs/results.md's data-free section: medians per run and calibration mode, the ratio to the reference."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.results_engine import render_data_free


def _record(run: str, used: bool, seconds: float, rss: float = 900.0) -> dict:
    return {"benchmark": "prune", "run": run, "calibration_used": used, "prune_seconds": seconds, "peak_rss_mb": rss,
            "phases": {"solve": seconds / 2, "copies": 0.01}, "versions": {"git": "abc1234"}}


def test_medians_ratios_and_the_goal_are_computed(tmp_path: Path) -> None:
    records = [_record("magnitude@50%", False, s) for s in (5.0, 7.0, 6.0)] + \
        [_record("magnitude@50%", True, 100.0, 1800.0), _record("rtn@int4", False, 3.0),
         _record("magnitude@70%", False, 20.0)]
    path = tmp_path / "engine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    lines = render_data_free([path])
    rows = {tuple(line.split(" | ")[:2]): line for line in lines if line.startswith("| ")}
    assert rows[("| magnitude@50%", "no (data-free)")].startswith(
        "| magnitude@50% | no (data-free) | 6.0 (3) | 0.69× (8.7 s) | 900 (reference 1340) | solve 3.0 |")
    calibrated = rows[("| magnitude@50%", "yes (`--calibrate always`)")]
    assert "| 100.0 (1) | 11.49× (8.7 s) | 1800 (reference 1340) |" in calibrated
    assert "| 3.0 (1) | – | 900 |" in rows[("| rtn@int4", "no (data-free)")]
    assert ("- magnitude@50% without its calibration pass: 6.0 s, 0.69× the reference code's 8.7 s: within the goal "
            "of 1.5×.") in lines
    slow = [_record("magnitude@50%", False, 20.0)]
    path.write_text(json.dumps(slow[0]) + "\n", encoding="utf-8")
    assert any("NOT within the goal" in line for line in render_data_free([path]))
    path.write_text("", encoding="utf-8")
    assert render_data_free([path])[0].startswith("No measurement yet")
