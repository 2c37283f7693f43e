"""The Sweep tab's research bench: calibration seeds (two or more) as mean ± std, and a time estimate before Run."""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path

import pytest

from app import forms, sweep_tab
from app.jobs import SESSIONS
from tests.helpers.synthetic_runs import write_run
from toolkit.api import RunConfig, list_runs
from toolkit.errors import ToolkitError
from toolkit.store.runs import STAMP
from toolkit.sweep import DEFAULT_RUN_SECONDS, estimate, parse_seeds, run_wall_seconds

QUICK = forms.Protocol(nsamples=4, seqlen=32, eval_seqlen=32, eval_windows=2, device="cpu")


def base(tmp_path: Path, **changes: object) -> RunConfig:
    fields = {"model": "tiny-llama", "method": "wanda", "sparsity": "50%", "nsamples": 4, "seqlen": 32,
              "eval_seqlen": 32, "eval_windows": 2, "device": "cpu", "out_dir": str(tmp_path), **changes}
    return RunConfig(**fields)  # type: ignore[arg-type]


def stored(tmp_path: Path, config: RunConfig, *, ppl: float = 25.0, seconds: float | None = None) -> Path:
    """A finished run of ``config`` in the store; ``seconds`` sets its wall time (its last event's stamp)."""
    path = write_run(tmp_path, {**config.to_dict(), "eval_dense": True}, ppl=ppl)
    if seconds is not None:
        lines = (path / "events.jsonl").read_text().splitlines()
        lines[-1] = json.dumps({**json.loads(lines[-1]), STAMP: seconds})
        (path / "events.jsonl").write_text("\n".join(lines) + "\n")
    return path


def test_a_run_from_before_event_stamps_is_timed_from_its_id_to_finished_at(tmp_path: Path) -> None:
    path = stored(tmp_path, base(tmp_path, eval_dense=True))
    lines = [json.loads(line) for line in (path / "events.jsonl").read_text().splitlines()]
    (path / "events.jsonl").write_text("".join(json.dumps({k: v for k, v in line.items() if k != STAMP}) + "\n"
                                               for line in lines))
    result = json.loads((path / "result.json").read_text())
    start = time.mktime(time.strptime(path.name[:15], "%Y%m%d-%H%M%S"))
    result["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start + 75))
    (path / "result.json").write_text(json.dumps(result))
    (record,) = list_runs(tmp_path)
    assert run_wall_seconds(record) == pytest.approx(75.0)


def test_a_seed_list_is_two_or_more_whole_numbers() -> None:
    assert parse_seeds("0, 1,2") == (0, 1, 2) and parse_seeds("") == () and parse_seeds(None) == ()
    with pytest.raises(ToolkitError, match="at least two calibration seeds, got one \\(3\\)"):
        parse_seeds("3")
    with pytest.raises(ToolkitError, match="whole numbers"):
        parse_seeds("0, -1")
    with pytest.raises(ToolkitError, match="listed twice"):
        parse_seeds("1, 1")


def test_a_seed_list_with_one_seed_gets_one_line_and_nothing_runs(tmp_path: Path) -> None:
    settings = sweep_tab.SweepSettings(model="tiny-llama", methods=["wanda"], sparsities=["50%"], protocol=QUICK,
                                       seeds="7")
    updates = list(sweep_tab.sweep_stream(settings, runs_dir=str(tmp_path), session="one-seed"))
    (update,) = updates
    assert update["status"].count("\n") == 0 and "at least two calibration seeds" in update["status"]
    assert list_runs(tmp_path) == [] and SESSIONS.get("one-seed", "sweep") is None
    assert "at least two calibration seeds" in sweep_tab.estimate_line(settings, str(tmp_path))


def test_seeds_repeat_every_point_and_are_drawn_as_mean_and_std(tmp_path: Path) -> None:
    ppls = {0: 30.0, 1: 33.0, 2: 36.0}
    for seed, ppl in ppls.items():
        stored(tmp_path, base(tmp_path, seed=seed, eval_dense=True), ppl=ppl)
    settings = sweep_tab.SweepSettings(model="tiny-llama", methods=["wanda"], sparsities=["50%"], protocol=QUICK,
                                       seeds="0, 1, 2")
    configs, _ = sweep_tab.sweep_configs(settings, str(tmp_path))
    assert [c.seed for c in configs] == [0, 1, 2]
    final = list(sweep_tab.sweep_stream(settings, runs_dir=str(tmp_path), session="seeds"))[-1]
    assert "3 of 3 points** (3 reused" in final["status"]
    wanda = final["curve"].data[0]
    assert list(wanda.y) == pytest.approx([statistics.fmean(ppls.values())])
    assert list(wanda.error_y.array) == pytest.approx([3.0]) and wanda.error_y.visible  # stdev(30, 33, 36)
    assert sorted(row[sweep_tab.COLUMNS.index("seed")] for row in final["table"]) == [0, 1, 2]


def test_the_estimate_scales_stored_wall_times_by_calibration_tokens(tmp_path: Path) -> None:
    for seconds in (40.0, 60.0):  # two stored wanda runs at 4 × 32 calibration tokens
        stored(tmp_path, base(tmp_path, sparsity="60%", eval_dense=True), seconds=seconds)
    records = list_runs(tmp_path)
    assert sorted(run_wall_seconds(r) for r in records) == pytest.approx([40.0, 60.0])
    doubled = [base(tmp_path, method=m, sparsity=s, nsamples=8, eval_dense=True)
               for m in ("wanda", "sparsegpt") for s in ("30%", "50%")]
    guess = estimate(doubled, records)
    # wanda: median(80, 120) = 100 s a run (twice the tokens); sparsegpt: none stored, the stated default
    assert guess.runs == 4 and guess.reused == 0
    assert guess.seconds == pytest.approx(2 * 100.0 + 2 * DEFAULT_RUN_SECONDS)
    assert guess.line.startswith("≈ 5 min for 4 runs") and "median of 2 stored runs" in guess.line
    assert f"sparsegpt: {DEFAULT_RUN_SECONDS:.0f} s a run (no finished run of it yet)" in guess.line
    again = estimate([base(tmp_path, sparsity="60%", eval_dense=True)], records)  # the stored experiment
    assert (again.runs, again.reused, again.seconds) == (0, 1, 0.0)
    assert "all 1 points are in the run store" in again.line
    assert math.isnan(run_wall_seconds(type("R", (), {"run_id": "r1", "result": {}, "path": tmp_path / "r1"})()))


def test_the_form_shows_the_estimate_before_run(tmp_path: Path) -> None:
    settings = sweep_tab.SweepSettings(model="tiny-llama", methods=["wanda", "magnitude"], sparsities=["30%", "50%"],
                                       protocol=QUICK, seeds="0, 1")
    line = sweep_tab.estimate_line(settings, str(tmp_path))
    assert line.startswith("**Estimate** ≈ 8 min for 8 runs") and "no finished run of it yet" in line
    assert list_runs(tmp_path) == []  # estimating runs nothing
