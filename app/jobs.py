"""Background jobs for the app: one pruning at a time per device, a queue, per-session cancel.

- :class:`DeviceQueue`: a FIFO of tickets; only the head may run, so a run waits its turn and
  can show its position. One queue per physical device (:func:`device_queue`), shared by the Run,
  Sweep and Lesson tabs: one pruning at a time on a device, whichever tab asked.
- :class:`Job`: drains an event iterator (``toolkit.api.run`` or a sweep) in a worker thread
  into a ``queue.Queue`` so the Gradio handler can poll with a timeout and refresh the page on a
  clock, even while the engine is silent inside a long solve.
- :class:`SessionJobs`: which job a browser session runs, so its Cancel button and the tab's
  ``unload`` reach it; the entry outlives the run so Cancel can say how it ended.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.api import CancelToken, device_slot, open_run
from toolkit.errors import ToolkitError
from toolkit.runtime.release import release_memory

log = logging.getLogger(__name__)
DONE = object()  # end of a job's stream


class DeviceQueue:
    """First come, first served: :meth:`try_start` succeeds only for the head ticket when idle."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[int] = []
        self._running: int | None = None
        self._ids = itertools.count(1)

    def join(self) -> int:
        """A new ticket at the back of the queue."""
        with self._lock:
            ticket = next(self._ids)
            self._waiting.append(ticket)
            return ticket

    def try_start(self, ticket: int) -> bool:
        """Take the device if ``ticket`` is first in line and nothing runs; True when it did."""
        with self._lock:
            if self._running is None and self._waiting and self._waiting[0] == ticket:
                self._running = self._waiting.pop(0)
            return self._running == ticket

    def position(self, ticket: int) -> int:
        """0 while running; k ≥ 1 when k jobs (running or waiting) are ahead; -1 when gone."""
        with self._lock:
            if self._running == ticket:
                return 0
            if ticket not in self._waiting:
                return -1
            return self._waiting.index(ticket) + (self._running is not None)

    def leave(self, ticket: int) -> None:
        """Give the device back, or step out of the line."""
        with self._lock:
            if self._running == ticket:
                self._running = None
            elif ticket in self._waiting:
                self._waiting.remove(ticket)

    @property
    def busy(self) -> bool:
        """True while a job holds the device."""
        with self._lock:
            return self._running is not None


_QUEUES: dict[str, DeviceQueue] = {}
_QUEUES_LOCK = threading.Lock()


def device_queue(device: str) -> DeviceQueue:
    """The process-wide queue of ``device`` ("auto", "cpu", "cuda", ...).

    Names of one physical device share a queue (:func:`toolkit.api.device_slot`: ``auto`` is the
    cpu queue on a machine without CUDA).
    """
    slot = device_slot(device)
    with _QUEUES_LOCK:
        return _QUEUES.setdefault(slot, DeviceQueue())


@dataclass
class Job:
    """An iterator drained in a worker thread; items come out of :meth:`get`, then :data:`DONE`.

    ``start(factory)`` calls ``factory()`` in the worker (so a slow model load never blocks the
    page). A :class:`ToolkitError` from it arrives as ``("error", message)``; any other
    exception as ``("error", "Type: message")`` and is logged with its traceback server-side.
    ``on_exit`` runs in the worker when the stream ends (it gives the device back); then the run's
    memory is given back (:func:`toolkit.runtime.release.release_memory`) before :data:`DONE`.
    """

    token: CancelToken = field(default_factory=CancelToken)
    finished: threading.Event = field(default_factory=threading.Event)
    run_id: str = ""
    state: str = "queued"  # queued | running | done
    _items: queue.Queue = field(default_factory=queue.Queue)
    _thread: threading.Thread | None = None

    def start(self, factory: Callable[[], Iterable[Any]], on_exit: Callable[[], None] = lambda: None) -> None:
        """Begin draining ``factory()`` in a daemon thread."""
        self.state = "running"
        self._thread = threading.Thread(target=self._drain, args=(factory, on_exit), name="prunelab-job", daemon=True)
        self._thread.start()

    def _drain(self, factory: Callable[[], Iterable[Any]], on_exit: Callable[[], None]) -> None:
        try:
            for item in factory():
                self._items.put(item)
        except ToolkitError as exc:
            self._items.put(("error", str(exc)))
        except Exception as exc:  # shown as a message; the traceback goes to the server log
            log.exception("job failed")
            self._items.put(("error", f"{type(exc).__name__}: {exc}"))
        finally:
            self.state = "done"
            on_exit()
            release_memory()  # the run's model, activations and solver state (and a failure's frames) given back
            self._items.put(DONE)
            self.finished.set()

    def get(self, timeout: float) -> Any:
        """The next item, or None when nothing came within ``timeout`` seconds."""
        try:
            return self._items.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None

    def cancel(self) -> None:
        """Ask the run to stop (it is recorded as cancelled in the run store)."""
        self.token.cancel()

    def stream_closed(self, line: DeviceQueue, ticket: int) -> None:
        """The page stopped following this job: a queued job steps out of ``line``, a running one is cancelled."""
        if self.state == "queued":  # closed while waiting: step out of the line
            line.leave(ticket)
            self.state = "done"
            self.finished.set()
        elif not self.finished.is_set():  # closed while running: the worker records the cancel
            self.cancel()


class SessionJobs:
    """``(session, kind) → Job``: what Cancel and the tab's unload act on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, str], Job] = {}

    def begin(self, session: str, kind: str) -> Job:
        """A fresh job for the session (cancelling one the session still had running)."""
        job = Job()
        with self._lock:
            old = self._jobs.get((session, kind))
            self._jobs[(session, kind)] = job
        if old is not None and not old.finished.is_set():
            old.cancel()
        return job

    def get(self, session: str, kind: str) -> Job | None:
        """The session's latest job of this kind, finished or not."""
        with self._lock:
            return self._jobs.get((session, kind))

    def close_session(self, session: str) -> int:
        """Cancel every job of a closed tab and forget them; returns how many were still running."""
        with self._lock:
            mine = [key for key in self._jobs if key[0] == session]
            jobs = [self._jobs.pop(key) for key in mine]
        running = [job for job in jobs if not job.finished.is_set()]
        for job in running:
            job.cancel()
        return len(running)


SESSIONS = SessionJobs()


def cancel_and_wait(session: str, kind: str, runs_dir: str, wait: float) -> tuple[Job, str] | None:
    """Cancel the session's job of ``kind`` (a Cancel button) and wait up to ``wait`` seconds for it to end.

    None when nothing is going on (no job, or one that finished without being cancelled); else the
    job and its run's status in the store: "" when it was cancelled before its run began,
    "cancelled" where the record cannot be read.
    """
    job = SESSIONS.get(session, kind)
    if job is None or (job.finished.is_set() and not job.token.cancelled):
        return None
    job.cancel()
    job.finished.wait(wait)
    if not job.run_id:
        return job, ""
    try:
        return job, open_run(Path(runs_dir) / job.run_id).status
    except ToolkitError:
        return job, "cancelled"
