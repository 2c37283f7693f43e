"""Shared fixtures: correlated calibration statistics, and for the browser tests the run gate and Chromium."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from tests.helpers.gate import Gate, registered
from tests.helpers.stats import correlated_stats
from toolkit.methods.base import LinearStats


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A browser test is also a slow one: it starts the app and drives Chromium (seconds to tens of seconds
    each), so ``pytest -m "not slow"`` is the quick tier (unit and tiny-model tests) and ``make test``,
    which selects ``slow or not slow or browser``, still runs every browser test."""
    for item in items:
        if item.get_closest_marker("browser") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def stats256() -> tuple[torch.Tensor, LinearStats]:
    """Correlated inputs of width 256."""
    return correlated_stats(256)


@pytest.fixture(scope="module")
def gate() -> Iterator[Gate]:
    """The test hook that holds a run before each linear (registered before a module's app is built)."""
    with registered(Gate()) as hook:
        yield hook


@pytest.fixture
def held(gate: Gate) -> Iterator[Gate]:
    """The gate closed at the start of a test and opened at its end (a failing test leaves no run hanging)."""
    gate.close()
    start = len(gate.log)
    try:
        yield gate
    finally:
        gate.open()
        print("gate log of this test:", *gate.log[max(0, start - 12):], sep="\n  ")  # shown when the test fails
