"""The app over three runs in the page: each run's model and memory are given back when it ends.

A run on the tiny model allocates little, so its heap would hide a leak in the noise; the method here
(:data:`HUNGRY`, Wanda underneath) also allocates :data:`SCRATCH_MIB` of scratch tensors in 1 MiB
blocks while it solves the first linear, as the engine's activations and statistics do on a real model,
and frees them before it returns. A server that keeps a finished run's memory (the model, or the freed
heap of the threads that ran it) grows by about that much a run; the test bounds the growth from the
first run to the third by one run's scratch, and checks that no run's model is still reachable.
"""

from __future__ import annotations

import dataclasses
import os
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser_app import chromium_path, dom_click, pick, serve, session_page, wait_for_text

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(chromium_path() is None, reason="needs Debian chromium: apt-get install chromium")]

HUNGRY = "hungry"
SCRATCH_MIB = 384  # allocated and freed by every run: a leak of a run's memory grows the server by this much
RUNS = 3


def hungry_spec() -> Any:
    """Wanda, plus :data:`SCRATCH_MIB` of written 1 MiB blocks held while the first linear of a run is solved."""
    import torch

    from toolkit.methods import get_method

    wanda = get_method("wanda")

    def solve(W: Any, stats: Any, target: Any, cfg: Any, ctx: Any) -> Any:
        if ctx.layer == 0 and ctx.name.endswith("q_proj"):
            scratch = [torch.ones(1 << 18) for _ in range(SCRATCH_MIB)]  # float32: 1 MiB each, written
            del scratch  # freed before the solve, as a layer's activations are
        return wanda.fn(W, stats, target, cfg, ctx)

    return dataclasses.replace(wanda, name=HUNGRY, fn=solve, summary="test: Wanda that allocates scratch memory")


def resident_mib() -> float:
    """The server's resident memory (the app is served in this process)."""
    import psutil

    return psutil.Process(os.getpid()).memory_info().rss / 2**20


@pytest.fixture
def models(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[weakref.ref]]:
    """Weak references to every model a run loads; :data:`HUNGRY` in the registry (before the app is built)."""
    import toolkit.methods as methods
    from toolkit.run import pipeline

    refs: list[weakref.ref] = []
    load = pipeline.load_model

    def recording(*args: Any, **kwargs: Any) -> Any:
        loaded = load(*args, **kwargs)
        refs.append(weakref.ref(loaded.model))
        return loaded

    monkeypatch.setattr(pipeline, "load_model", recording)
    monkeypatch.setitem(methods.METHODS, HUNGRY, hungry_spec())
    yield refs


def runs_in_pages(chromium: Any, runs_dir: Path, runs: int) -> list[float]:
    """Serve the app, run :data:`HUNGRY` ``runs`` times, each in a fresh browser context closed after it
    finished; the server's resident MiB after each run."""
    after: list[float] = []
    with serve(str(runs_dir)) as url:
        for _ in range(runs):
            page = session_page(chromium, url)
            try:
                pick(page, "run-method", HUNGRY)
                dom_click(page, "#run-button")
                wait_for_text(page, "#run-status", "✓ finished", timeout=600)
            finally:
                page.context.close()
            time.sleep(1.0)  # the worker threads end after the page's last update
            after.append(resident_mib())
    return after


def test_three_runs_give_their_memory_back(chromium: Any, tmp_path: Path, models: list[weakref.ref]) -> None:
    after = runs_in_pages(chromium, tmp_path, RUNS)
    growth = after[-1] - after[0]
    print(f"\nserver resident memory after each run: {[round(v) for v in after]} MiB; growth {growth:.0f} MiB")
    assert len(models) == RUNS
    assert all(ref() is None for ref in models), "a finished run's model is still reachable"
    assert growth < SCRATCH_MIB, (f"the server grew by {growth:.0f} MiB from run 1 to run {RUNS} "
                                  f"(each run allocates and frees {SCRATCH_MIB} MiB): {after}")
