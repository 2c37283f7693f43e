"""A test hook that makes live-progress tests independent of how fast the machine is.

:class:`Gate` is a registered method that waits before every linear until the test lets it go, so a
live view is checked in a state the test chose (one linear done, two, three ...) instead of in whatever
a redraw happened to catch on a fast or a loaded machine.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class Gate:
    """A registered method (:data:`NAME`, FISTAPruner underneath) that waits before every linear until
    :meth:`release` lets it go; while it waits it honours cancellation (the run's cancel token)."""

    NAME = "gated"

    def __init__(self, base: str = "fista") -> None:
        from toolkit.methods import get_method

        self._permits = threading.Semaphore(0)
        self.log: list[str] = []  # what happened at the gate, in order (printed when a held test fails)
        spec = get_method(base)
        self.spec = dataclasses.replace(spec, name=self.NAME, fn=self._gated(spec.fn),
                                        summary=f"test hook: {base}, one linear per release")

    def _gated(self, solve: Callable[..., Any]) -> Callable[..., Any]:
        def gated(W: Any, stats: Any, target: Any, cfg: Any, ctx: Any) -> Any:
            # cancellation is checked before every try, so a cancelled run never takes a permit: its worker
            # may still be alive when the next test closes the gate and releases permits for its own run
            self._note(f"layer {ctx.layer} {ctx.name} waits")
            try:
                ctx.check_cancel()
                while not self._permits.acquire(timeout=0.05):
                    ctx.check_cancel()
            except BaseException:
                self._note(f"layer {ctx.layer} {ctx.name} cancelled at the gate")
                raise
            self._note(f"layer {ctx.layer} {ctx.name} passes")
            try:
                return solve(W, stats, target, cfg, ctx)
            finally:
                self._note(f"layer {ctx.layer} {ctx.name} solved or stopped")

        return gated

    def _note(self, what: str) -> None:
        self.log.append(f"{time.monotonic():.3f} [{threading.current_thread().name}] {what}")

    def release(self, linears: int = 1) -> None:
        """Let ``linears`` more linears be solved."""
        self._note(f"release {linears}")
        self._permits.release(linears)

    def open(self) -> None:
        """Let the run go to the end."""
        self.release(100_000)

    def close(self) -> None:
        """Hold the next linear again (permits left over are dropped)."""
        self._note("close")
        self._permits = threading.Semaphore(0)


@contextmanager
def registered(gate: Gate) -> Iterator[Gate]:
    """``gate`` in the method registry (before the app is built, so the form offers it)."""
    from toolkit.methods import METHODS

    METHODS[gate.NAME] = gate.spec
    try:
        yield gate
    finally:
        del METHODS[gate.NAME]


class EvalGate:
    """Holds a run at the first progress tick of every evaluation stage (perplexity, a task, the texts)
    until :meth:`release`; :meth:`progress_class` replaces ``toolkit.run.pipeline.ProgressEvents``."""

    def __init__(self) -> None:
        self._permits = threading.Semaphore(0)
        self.held: list[tuple[str, str]] = []  # (phase, what) of every stage held so far

    def progress_class(self) -> type:
        from toolkit.errors import RunCancelled
        from toolkit.run.evals import ProgressEvents

        gate = self

        class HeldProgress(ProgressEvents):
            def callback(self, phase: str, what: str) -> Callable[[int, int], None]:
                report, first = super().callback(phase, what), [True]

                def held(done: int, total: int) -> None:
                    report(done, total)  # the tick is out (the page can show it) before the stage waits
                    if first[0]:
                        first[0] = False
                        gate.held.append((phase, what))
                        while self.cancelled() or not gate._permits.acquire(timeout=0.05):
                            if self.cancelled():  # checked before every try: a cancelled run takes no permit
                                raise RunCancelled("cancelled")

                return held

        return HeldProgress

    def release(self, stages: int = 1) -> None:
        """Let ``stages`` more held stages go on."""
        self._permits.release(stages)

    def open(self) -> None:
        """Let every stage go on."""
        self.release(100_000)
