"""Host memory over a run, by engine phase: resident memory sampled in a thread, labelled with the phase in progress.

The label of a sample is the innermost :class:`toolkit.engine.phases.PhaseTimer` section open at that moment
(``capture``, ``copies``, ``statistics``, ``solve``, ``writeback``, ``propagation``, ``error`` …); outside
every section it is ``load`` before the first section opened, ``after`` once the last one closed (saving the
checkpoint, writing the result) and ``engine`` in between (the driver's own steps). The peak per label says in
which phase a regression of the high-water mark happens; the timeline (at most :data:`POINTS` points, the
highest sample of each time bucket) shows its shape.

Sampling misses peaks shorter than the interval (default 20 ms); the process's ``VmHWM`` stays the exact
high-water mark.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

POINTS = 120


def rss_mib() -> tuple[float, float]:
    """(VmRSS, RssFile) of this process now, MiB: all resident memory, and the part mapped from files
    (memory-mapped checkpoint shards); (0, 0) where /proc is missing."""
    found = {"VmRSS:": 0.0, "RssFile:": 0.0}
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            key = line.split(":")[0] + ":"
            if key in found:
                found[key] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return found["VmRSS:"], found["RssFile:"]


class RssTimeline:
    """Samples resident memory every ``interval`` seconds while :meth:`running` is open."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.samples: list[tuple[float, float, str]] = []  # (seconds since start, MiB, label)
        self.file_by_label: dict[str, float] = {}  # the highest RssFile sampled per label, MiB
        self.file_peak = 0.0  # the highest RssFile sampled, MiB
        self._stack: list[str] = []
        self._opened = False
        self._last_close = 0.0
        self._start = 0.0
        self._stop = threading.Event()

    def _label(self) -> str:
        if self._stack:
            return self._stack[-1]
        return "engine" if self._opened else "load"

    def _loop(self) -> None:
        while not self._stop.is_set():
            total, mapped = rss_mib()
            self.file_peak = max(self.file_peak, mapped)
            label = self._label()
            self.samples.append((time.perf_counter() - self._start, total, label))
            self.file_by_label[label] = max(self.file_by_label.get(label, 0.0), mapped)
            self._stop.wait(self.interval)

    @contextlib.contextmanager
    def running(self) -> Iterator[RssTimeline]:
        """Sample inside, with every PhaseTimer section reporting its phase here."""
        from toolkit.engine.phases import PhaseTimer

        original = PhaseTimer.section
        timeline = self

        @contextlib.contextmanager
        def section(timer: PhaseTimer, phase: str) -> Iterator[None]:
            timeline._opened = True
            timeline._stack.append(phase)
            try:
                with original(timer, phase):
                    yield
            finally:
                timeline._stack.pop()
                timeline._last_close = time.perf_counter() - timeline._start

        self._start = time.perf_counter()
        thread = threading.Thread(target=self._loop, daemon=True)
        PhaseTimer.section = section  # type: ignore[method-assign]
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()
            PhaseTimer.section = original  # type: ignore[method-assign]

    def labelled(self) -> list[tuple[float, float, str]]:
        """The samples, those after the last section closed relabelled ``after``."""
        return [(t, mib, "after" if label == "engine" and t > self._last_close else label)
                for t, mib, label in self.samples]

    def report(self) -> dict[str, Any]:
        """``rss_by_phase_mib`` (peak sample per label), ``rss_file_by_phase_mib`` (the file-mapped part's peak per
        label, before the relabelling as ``after``) and ``rss_timeline`` ([seconds, MiB, label] points)."""
        samples = self.labelled()
        peaks: dict[str, float] = {}
        for _, mib, label in samples:
            peaks[label] = max(peaks.get(label, 0.0), mib)
        step = max(1, -(-len(samples) // POINTS))
        points = [max(samples[i : i + step], key=lambda s: s[1]) for i in range(0, len(samples), step)]
        return {"rss_by_phase_mib": {k: round(v, 1) for k, v in peaks.items()},
                "rss_timeline": [[round(t, 2), round(mib, 1), label] for t, mib, label in points],
                "rss_sample_seconds": self.interval, "rss_file_peak_mib": round(self.file_peak, 1),
                "rss_file_by_phase_mib": {k: round(v, 1) for k, v in self.file_by_label.items()}}
