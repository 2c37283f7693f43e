"""The Lesson's clock: stage names, and an estimate that moves from the reference toward the measured pace."""

from __future__ import annotations

import math

import pytest

from toolkit.events import (
    EvalPoint,
    EvalProgress,
    Event,
    LayerDone,
    LayerStarted,
    RunFinished,
    RunStarted,
)
from toolkit.teach.lesson_clock import LessonClock, Profile

PROFILE = Profile(load=2.0, window=0.5, prompt=1.0, capture=0.5, finish=0.1, layer={"magnitude": 1.0, "fista": 4.0},
                  default_layer=2.0, wrap=3.0, layers=4, prompts=2)
WINDOWS = 3


def lesson_events(methods: tuple[str, ...], pace: float, slower_from: float = math.inf,
                  factor: float = 1.0) -> list[tuple[float, Event]]:
    """Every boundary event of a lesson whose work takes ``pace`` × the profile's seconds (× ``factor`` later on)."""
    timeline: list[tuple[float, Event]] = []
    now = 0.0

    def spend(reference: float, event: Event) -> None:
        nonlocal now
        now += reference * pace * (factor if now >= slower_from else 1.0)
        timeline.append((now, event))

    for index, method in enumerate(methods):
        spend(PROFILE.load, RunStarted(run_id=method, model="m", method=method, sparsity="50%", options={},
                                       protocol={}, num_layers=PROFILE.layers, linears=["a", "b"], device="cpu"))
        if index == 0:
            for done in range(WINDOWS + 1):
                spend(PROFILE.window if done else 0.0, EvalProgress(phase="dense", what="perplexity", done=done,
                                                                    total=WINDOWS))
        else:
            spend(0.0, EvalPoint(dataset="wiki", which="dense", ppl=20.0, seq_len=8, windows=WINDOWS, tokens=24,
                                 cached=True))
        for done in range(PROFILE.prompts + 1):
            spend(PROFILE.prompt if done else 0.0, EvalProgress(phase="dense", what="generation", done=done,
                                                                total=PROFILE.prompts))
        for layer in range(PROFILE.layers):
            spend(PROFILE.capture if layer == 0 else 0.0, LayerStarted(layer=layer, num_layers=PROFILE.layers,
                                                                       groups=[]))
            spend(PROFILE.layer[method], LayerDone(layer=layer, num_layers=PROFILE.layers, output_rel_error=0.1,
                                                   seconds=1.0))
        for what, unit in (("perplexity", PROFILE.window), ("generation", PROFILE.prompt)):
            total = WINDOWS if what == "perplexity" else PROFILE.prompts
            for done in range(total + 1):
                opening = PROFILE.wrap if what == "perplexity" else 0.0  # the pruning's last steps come first
                spend(unit if done else opening, EvalProgress(phase="pruned", what=what, done=done, total=total))
        spend(PROFILE.finish, RunFinished(achieved_sparsity=0.5, prune_seconds=1.0, ppl={}, dense_ppl={}))
    return timeline


def replay(methods: tuple[str, ...], timeline: list[tuple[float, Event]], until: float) -> LessonClock:
    clock = LessonClock(PROFILE, methods, WINDOWS, 0.0)
    for at, event in timeline:
        if at > until:
            break
        clock.apply(event, at)
    return clock


def test_before_anything_is_measured_the_estimate_is_the_reference_profile() -> None:
    methods = ("magnitude", "fista")
    clock = LessonClock(PROFILE, methods, WINDOWS, 0.0)
    reference = lesson_events(methods, pace=1.0)[-1][0]
    assert clock.seconds_left(0.0) == pytest.approx(reference)
    assert clock.stage_line({"magnitude": "Magnitude"}) == "Magnitude (1 of 2 to run) · loading the model"


@pytest.mark.parametrize("pace", [0.25, 3.0])
def test_a_machine_slower_or_faster_than_the_reference_is_measured_within_the_first_run(pace: float) -> None:
    methods = ("magnitude", "fista")
    timeline = lesson_events(methods, pace)
    actual = timeline[-1][0]
    first_layers = next(at for at, e in timeline if isinstance(e, LayerDone) and e.layer == 1)
    clock = replay(methods, timeline, first_layers)
    assert clock.speed(first_layers) == pytest.approx(pace, rel=0.02)
    assert first_layers + clock.seconds_left(first_layers) == pytest.approx(actual, rel=0.05)
    reference = LessonClock(PROFILE, methods, WINDOWS, 0.0).seconds_left(0.0)
    assert reference != pytest.approx(actual, rel=0.5)  # the reference alone was far off


def test_the_wrap_up_is_its_own_kind_and_leaves_the_window_pace_pure() -> None:
    methods = ("magnitude", "fista")
    timeline = lesson_events(methods, pace=2.0)
    clock = replay(methods, timeline, timeline[-1][0])
    measured = clock.measured()
    assert measured["window"] == pytest.approx(2.0 * PROFILE.window)  # not the window plus the wrap-up
    assert measured["wrap"] == pytest.approx(2.0 * PROFILE.wrap)
    # from the first dense window, which has no wrap-up in it, the whole lesson is estimated right
    actual = timeline[-1][0]
    first_window = next(at for at, e in timeline if isinstance(e, EvalProgress) and e.done == 1)
    early = replay(methods, timeline, first_window)
    assert first_window + early.seconds_left(first_window) == pytest.approx(actual, rel=0.02)


def test_a_change_of_pace_midway_is_followed() -> None:
    methods = ("magnitude", "fista")
    timeline = lesson_events(methods, pace=1.0, slower_from=20.0, factor=2.0)  # twice as slow from 20 s on
    actual = timeline[-1][0]
    before = 20.0 + replay(methods, timeline, 20.0).seconds_left(20.0)
    late = next(at for at, e in timeline if isinstance(e, LayerDone) and e.layer == 3 and at > 30)
    after = late + replay(methods, timeline, late).seconds_left(late)
    assert before / actual - 1 < -0.2  # the slowdown was not known yet
    assert abs(after / actual - 1) < 0.1


def test_the_stage_line_names_each_stage_in_turn() -> None:
    methods = ("magnitude",)
    timeline = lesson_events(methods, pace=1.0)
    clock = LessonClock(PROFILE, methods, WINDOWS, 0.0)
    seen = []
    for at, event in timeline:
        clock.apply(event, at)
        line = clock.stage_line()
        if line and (not seen or seen[-1] != line):
            seen.append(line)
    stages = [line.split(" · ", 1)[1] for line in seen]
    assert stages[:2] == ["dense evaluation", "dense evaluation · window 1 of 3"]
    assert "calibration: capturing layer 0's inputs" in stages
    assert "pruning layer 1 of 4" in stages and "pruning layer 4 of 4" in stages
    assert "pruned evaluation · window 3 of 3" in stages and "generations · prompt 2 of 2" in stages
    assert clock.seconds_left(timeline[-1][0]) == 0.0 and clock.fraction(timeline[-1][0]) == 1.0
    assert clock.stage_line() == ""


def test_a_run_refused_before_it_started_moves_the_clock_to_the_next() -> None:
    clock = LessonClock(PROFILE, ("magnitude", "fista"), WINDOWS, 0.0)
    clock.ended("magnitude", 1.0)
    assert clock.stage_line().startswith("fista (2 of 2 to run) · loading the model")
    clock.ended("magnitude", 2.0)  # a second end of the same run changes nothing
    assert clock.index == 1


def test_the_first_load_imports_once_and_does_not_set_the_pace() -> None:
    methods = ("magnitude", "fista")
    timeline = lesson_events(methods, pace=1.0)
    shifted = [(at + (100.0 if at > 0 else 0.0), event) for at, event in timeline]  # a first load 100 s longer
    actual = shifted[-1][0]
    first_window = next(at for at, e in shifted if isinstance(e, EvalProgress) and e.done == 1)
    clock = replay(methods, shifted, first_window)
    assert clock.speed(first_window) == pytest.approx(1.0)
    assert first_window + clock.seconds_left(first_window) == pytest.approx(actual, rel=0.05)


def test_the_run_under_way_is_timed_at_its_own_pace_once_its_layers_show_it() -> None:
    methods = ("magnitude", "fista")
    profile = Profile(load=2.0, window=0.5, prompt=1.0, capture=0.5, finish=0.1, layer={"magnitude": 1.0, "fista": 4.0},
                      default_layer=2.0, layers=20, prompts=2)
    clock = LessonClock(profile, methods, WINDOWS, 0.0)
    clock.index = 1  # magnitude is done; fista prunes at 3× its reference, everything else at the reference
    run = clock.runs[1]
    run.left = {"layer:fista": 20.0}
    now = 0.0
    for layer in range(10):
        clock.apply(LayerStarted(layer=layer, num_layers=20, groups=[]), now)
        now += 12.0
        clock.apply(LayerDone(layer=layer, num_layers=20, output_rel_error=0.1, seconds=12.0), now)
    weight = 10 / 12  # OWN_PACE_AFTER = 2
    assert clock.seconds_left(now) == pytest.approx(10 * (weight * 12.0 + (1 - weight) * 4.0 * clock.speed(now)))
    assert clock.seconds_left(now) > 10 * 10.0  # near the 120 s the run still needs, not the reference's 40 s


@pytest.mark.parametrize("pace", [1.0, 2.0, 0.5])
def test_from_the_first_window_on_the_whole_estimate_is_scaled_by_this_machines_pace(pace: float) -> None:
    methods = ("magnitude", "fista")
    timeline = lesson_events(methods, pace)
    reference = lesson_events(methods, pace=1.0)[-1][0]
    probe = next(at for at, e in timeline if isinstance(e, EvalProgress) and e.done == 1)  # the first window
    before = replay(methods, timeline, probe - 1e-9)
    # before the probe: the reference (the first load is not pace, so only its own length counts)
    assert probe - 1e-9 + before.seconds_left(probe - 1e-9) == pytest.approx(reference + PROFILE.load * (pace - 1))
    clock = replay(methods, timeline, probe)
    assert clock.speed(probe) == pytest.approx(pace)
    assert probe + clock.seconds_left(probe) == pytest.approx(pace * reference)  # 2× slower: 2× the estimate


def test_a_profile_from_measured_lessons_averages_each_kind_in_units_of_the_probe() -> None:
    quiet = {"window": 1.0, "prompt": 1.2, "load": 0.5, "capture": 0.02, "finish": 0.0, "wrap": 4.0,
             "layer:magnitude": 0.2, "layer:fista": 3.0}
    busy = {k: 3.0 * v for k, v in quiet.items()} | {"layer:fista": 3.0 * 2.0}  # 3× slower, FISTA relatively faster
    profile = Profile.from_measured([quiet, busy], default_layer="magnitude", layers=30)
    probe = (1.0 + 3.0) / 2
    assert profile.window == pytest.approx(probe)
    assert profile.prompt == pytest.approx(1.2 * probe) and profile.load == pytest.approx(0.5 * probe)
    assert profile.wrap == pytest.approx(4.0 * probe)
    assert profile.layer == pytest.approx({"magnitude": 0.2 * probe, "fista": (3.0 + 2.0) / 2 * probe})
    assert profile.default_layer == pytest.approx(0.2 * probe) and profile.layers == 30
    with pytest.raises(ValueError, match="window"):
        Profile.from_measured([{"prompt": 1.0}])
