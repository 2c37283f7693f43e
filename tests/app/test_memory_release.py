"""A run's model is released when its job ends, however it ends: the app's Run handler and the notebook dashboard.

Each test records a weak reference to the model the run loads, and disables the automatic garbage
collector while the run goes on: what frees the model is then either its last reference going away or
the release the run's end asks for (:func:`toolkit.runtime.release.release_memory`), never a collection
that happened to come by. A run that keeps its model reachable (a job, a session, a closure, a
traceback through a cycle) fails them. The last test checks that the release gives the freed C heap back.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import threading
import time
import weakref
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest

import toolkit.methods as methods
from app import forms
from app.jobs import SESSIONS
from app.run_tab import run_stream
from toolkit.methods import get_method
from toolkit.run import pipeline
from toolkit.runtime.memory import keep_freed_memory
from toolkit.runtime.release import release_memory, resident_mib

TINY = forms.Protocol(nsamples=4, seqlen=32, eval_seqlen=32, eval_windows=2, device="cpu")
SLOW = "max_rounds=100000\npatience=100000\neps=1e-12"  # FISTAPruner that runs until cancelled


@pytest.fixture
def models(monkeypatch: pytest.MonkeyPatch) -> list[weakref.ref]:
    """Weak references to every model a run loads from now on."""
    refs: list[weakref.ref] = []
    load = pipeline.load_model

    def recording(*args: Any, **kwargs: Any) -> Any:
        loaded = load(*args, **kwargs)
        refs.append(weakref.ref(loaded.model))
        return loaded

    monkeypatch.setattr(pipeline, "load_model", recording)
    return refs


@contextmanager
def collector_off() -> Iterator[None]:
    """No automatic collection: only the run's own release (or a last reference dropped) frees its model."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def settings(**fields: Any) -> forms.RunSettings:
    return forms.RunSettings(**{"model": "tiny-llama", "method": "wanda", "protocol": TINY, **fields})


def released(refs: list[weakref.ref]) -> bool:
    return bool(refs) and all(ref() is None for ref in refs)


def test_a_finished_run_releases_its_model_when_the_job_ends(tmp_path: Path, models: list[weakref.ref]) -> None:
    with collector_off():
        updates = list(run_stream(settings(), runs_dir=str(tmp_path), session="memory-finished"))
        job = SESSIONS.get("memory-finished", "run")
        assert "✓ finished" in updates[-1]["status"]
        assert job is not None and job.finished.is_set()
        assert released(models), "the finished run's model is still reachable"


def test_a_run_closed_mid_way_releases_its_model(tmp_path: Path, models: list[weakref.ref]) -> None:
    with collector_off():
        stream = cast(Generator, run_stream(settings(method="fista", extra_options=SLOW), runs_dir=str(tmp_path),
                                            session="memory-closed"))
        for update in stream:
            if "▶ running" in update.get("status", ""):
                break
        stream.close()  # a closed tab: the run is cancelled
        job = SESSIONS.get("memory-closed", "run")
        assert job is not None and job.finished.wait(60)
        assert released(models), "the cancelled run's model is still reachable (its exception's frames?)"


def test_a_failed_run_releases_its_model(tmp_path: Path, models: list[weakref.ref],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(*args: Any) -> Any:
        raise RuntimeError("solver blew up")

    spec = dataclasses.replace(get_method("wanda"), name="fails", fn=fails)
    monkeypatch.setitem(methods.METHODS, spec.name, spec)
    with collector_off():
        updates = list(run_stream(settings(method="fails"), runs_dir=str(tmp_path), session="memory-failed"))
        assert "solver blew up" in updates[-1]["status"]
        assert released(models), "the failed run's model is still reachable (its traceback's frames?)"


def test_the_notebook_dashboard_releases_its_models(tmp_path: Path, models: list[weakref.ref]) -> None:
    pytest.importorskip("ipywidgets")
    from toolkit.notebook.widgets import Dashboard

    quick = {"nsamples": 4, "seqlen": 32, "eval_seqlen": 32, "eval_windows": 2}
    dash = Dashboard(model="tiny-llama", method="wanda", sparsity="50%", runs_dir=str(tmp_path), **quick)
    with collector_off():
        dash.start()  # the Run button: a background thread
        assert dash._thread is not None
        dash._thread.join(120)
        assert dash.view.status == "finished", dash.status.value
        dash.method.value, dash.options.value = "fista", SLOW.replace("\n", ", ")
        dash.start()  # a second run, cancelled mid-way
        deadline = time.monotonic() + 60
        while dash.view.status != "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        dash.cancel()
        dash._thread.join(60)
        assert dash.view.status == "cancelled", dash.status.value
        assert len(models) == 2 and released(models), "the kernel keeps a finished or cancelled run's model"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the C heap is trimmed with glibc's malloc_trim")
def test_release_gives_the_freed_heap_back() -> None:
    assert keep_freed_memory(), "glibc's mallopt is needed for this test"  # freed blocks stay in the heap
    blocks: list[bytearray] = []
    held: list[float] = []

    def allocate_and_free() -> None:  # in its own thread (its own arena), as a run's worker does
        blocks.extend(bytearray(1 << 20) for _ in range(256))  # 256 MiB in 1 MiB blocks, written (resident)
        held.append(resident_mib())
        blocks.clear()

    before = resident_mib()
    worker = threading.Thread(target=allocate_and_free)
    worker.start()
    worker.join()
    kept = resident_mib()
    assert held[0] - before > 200  # the blocks were resident
    assert kept - before > 150, "freed blocks went back without a trim: the test no longer shows the release"
    result = release_memory()
    assert result.trimmed
    assert result.rss_after_mib < kept - 150, (before, held, kept, result)
