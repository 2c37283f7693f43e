"""The status line names every phase of a run and its time left counts the phases still to come."""

from __future__ import annotations

import re

from toolkit.events import (
    EvalPoint,
    EvalProgress,
    LayerDone,
    LayerStarted,
    RunFinished,
    RunStarted,
    SublayerPruned,
)
from toolkit.live.phase import progress_line
from toolkit.live.view import RunView

ZERO_LEFT = re.compile(r"about 0 s left")
LINEARS = ["q_proj", "down_proj"]
PROTOCOL = {"evaluation": {"dataset": "wiki", "seqlen": 64, "windows": 16},
            "zero_shot": {"tasks": ["rte"], "source": "local", "limit": 2}}


def timeline(dense_cached: bool = False) -> list[tuple[float, object]]:
    """(clock, event) of a 2-layer run: dense perplexity, rte and generation, capture, pruning, pruned evals."""
    events: list[tuple[float, object]] = [(0.0, RunStarted(run_id="r", model="tiny-llama", method="wanda",
                                                           sparsity="50%", options={}, protocol=PROTOCOL,
                                                           num_layers=2, linears=LINEARS, device="cpu"))]
    clock = 1.0
    stages = [("rte", 4), ("generation", 5)] if dense_cached else [("perplexity", 16), ("rte", 4), ("generation", 5)]
    for what, total in stages:  # 10 s per dense stage
        for done in range(1, total + 1):
            events.append((clock + 10.0 * done / total, EvalProgress(phase="dense", what=what, done=done, total=total)))
        clock += 10.0
        if what == "perplexity":
            events.append((clock, EvalPoint(dataset="wiki", which="dense", ppl=20.0, seq_len=64, windows=16,
                                            tokens=1024)))
    if dense_cached:
        events.insert(1, (0.5, EvalPoint(dataset="wiki", which="dense", ppl=20.0, seq_len=64, windows=16, tokens=1024)))
    clock += 20.0  # calibration capture: no event of its own
    for layer in range(2):
        events.append((clock, LayerStarted(layer=layer, num_layers=2, groups=[[n] for n in LINEARS])))
        for name in LINEARS:
            clock += 5.0
            events.append((clock, SublayerPruned(layer=layer, name=name, shape=[8, 8], sparsity=0.5, rel_error=0.1,
                                                 rel_error_dense=0.1, damping=0.0, seconds=5.0)))
        events.append((clock, LayerDone(layer=layer, num_layers=2, output_rel_error=0.1, seconds=10.0)))
    clock += 3.0  # saving the masks
    for what, total in (("perplexity", 16), ("rte", 4), ("generation", 5)):
        for done in range(1, total + 1):
            events.append((clock + 10.0 * done / total, EvalProgress(phase="pruned", what=what, done=done,
                                                                     total=total)))
        clock += 10.0
    events.append((clock + 0.5, RunFinished(achieved_sparsity=0.5, prune_seconds=20.0, ppl={"wiki": 25.0},
                                            dense_ppl={"wiki": 20.0})))
    return events


def lines_every_quarter_second(events: list[tuple[float, object]]) -> list[tuple[float, str, tuple[str, float]]]:
    """The status line as a page polling 4 times a second would show it, from 0.25 s after the click on,
    with the view's (status, fraction of linears pruned) at that moment."""
    view, out, index, now = RunView(), [], 0, 0.25
    end = events[-1][0]
    while now <= end:
        while index < len(events) and events[index][0] <= now:
            view.apply(events[index][1], events[index][0])  # type: ignore[arg-type]
            index += 1
        out.append((now, progress_line(view, now), (view.status, view.fraction_done)))
        now += 0.25
    return out


def left_seconds(line: str) -> float | None:
    found = re.search(r"about (?:(\d+) min )?(\d+) s left", line)
    return None if not found else 60.0 * int(found.group(1) or 0) + int(found.group(2))


def test_every_phase_is_named_and_nothing_says_layer_0_before_pruning() -> None:
    seen = []
    for now, line, (status, fraction) in lines_every_quarter_second(timeline()):
        assert line and line != "idle", f"{now} s: nothing said"
        if now < 51.0:  # dense evaluation (1–31 s) and calibration capture (31–51 s)
            assert not re.search(r"pruning layer|0% of linears|layers done", line), (now, line)
        if 31.0 < now < 51.0:
            assert line.startswith("calibration capture"), (now, line)
        if status == "running" and fraction >= 1.0:  # pruning done: the pruned evaluation runs
            assert not ZERO_LEFT.search(line), (now, line)
        seen.append(line.split(" · ")[0])
    names = " | ".join(dict.fromkeys(seen))
    for phase in ("evaluating dense", "zero-shot rte (dense)", "generating dense", "calibration capture",
                  "pruning layer 0", "pruning layer 1", "pruning done", "evaluating pruned", "zero-shot rte (pruned)",
                  "generating pruned"):
        assert phase in names, f"{phase!r} never named; named: {names}"


def test_time_left_while_pruning_counts_the_pruned_evaluation() -> None:
    for now, line, (status, fraction) in lines_every_quarter_second(timeline()):
        if status == "running" and line.startswith("pruning layer 1") and fraction >= 0.75:
            left = left_seconds(line)
            assert left is not None and left >= 30, (now, line)  # 3 pruned stages of 10 s each still to come
        if line.startswith("evaluating pruned") and "window 8/16" in line:
            assert (left_seconds(line) or 0) >= 20, line  # rte and generation still to come


def test_a_cached_dense_perplexity_names_the_pruned_perplexity_instead_of_guessing() -> None:
    lines = lines_every_quarter_second(timeline(dense_cached=True))
    assert any(line.startswith("calibration capture") for _, line, _ in lines)
    pruning = [line for _, line, _ in lines if line.startswith("pruning layer")]
    assert pruning and all("+ the pruned evaluation" in line for line in pruning)
    assert not any(ZERO_LEFT.search(line) for _, line, (_, fraction) in lines if fraction >= 1.0)


def test_a_replay_without_stamps_says_its_elapsed_time_was_not_recorded() -> None:
    view = RunView()
    for _, event in timeline():
        view.apply(event)  # type: ignore[arg-type]  # no clock: an older run store without stamps
    assert view.status == "finished" and "elapsed not recorded" in progress_line(view, 0.0)
    timed = RunView()
    for clock, event in timeline():
        timed.apply(event, clock)  # type: ignore[arg-type]
    assert "elapsed 1 min 44 s" in progress_line(timed, 1e9)  # RunStarted at 0 s, RunFinished at 104.5 s
