"""bench_scale's memory timeline labels each RSS sample with the engine phase in progress."""

from __future__ import annotations

import time

from benchmarks.rss_timeline import RssTimeline
from toolkit.engine.phases import PhaseTimer


def test_samples_carry_the_phase_and_the_timer_is_put_back() -> None:
    original = PhaseTimer.section
    timeline = RssTimeline(interval=0.005)
    with timeline.running():
        time.sleep(0.03)
        timer = PhaseTimer()
        with timer.section("solve"):
            time.sleep(0.05)
        time.sleep(0.03)
    assert PhaseTimer.section is original
    assert timer.current["solve"] > 0.04  # the wrapped section still charges its phase
    labels = [label for _, _, label in timeline.labelled()]
    assert labels[0] == "load" and "solve" in labels and labels[-1] == "after"
    report = timeline.report()
    assert set(report["rss_by_phase_mib"]) == {"load", "solve", "after"}
    assert all(mib > 0 for mib in report["rss_by_phase_mib"].values())
    assert len(report["rss_timeline"]) <= 120
