"""Under torchrun every rank meets an input error the same way: rank 0 prints one line, the others exit quietly.

torchrun's environment is set by hand (no launcher runs); its "stop the other ranks" is a SIGTERM
this process sends itself.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from toolkit.cli import distributed
from toolkit.cli.main import main
from toolkit.errors import DistributedError, ToolkitError

ARGV = ["prune", "--distributed", "--model", "tiny-llama", "--propagate", "dense", "--sparsity", "150%"]


def _torchrun(monkeypatch: pytest.MonkeyPatch, rank: int) -> None:
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("LOCAL_RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", "2")


def _launcher_stops_us_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGTERM))
    timer.start()
    return timer


def test_rank_0_prints_the_input_error_once(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    _torchrun(monkeypatch, 0)
    assert main(ARGV) == 2
    assert capsys.readouterr().err.splitlines() == ["error: sparsity 1.5 is outside [0, 1): use e.g. 50% or 0.5"]


def test_another_rank_says_nothing_and_exits_with_the_same_code(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture) -> None:
    _torchrun(monkeypatch, 1)
    monkeypatch.setattr(distributed, "LINGER_SECONDS", 30.0)
    timer = _launcher_stops_us_after(0.3)  # rank 0 exited; torchrun stops the others
    try:
        assert main(ARGV) == 2
    finally:
        timer.cancel()
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_a_rank_not_stopped_says_its_own_error_after_the_wait(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture) -> None:
    _torchrun(monkeypatch, 1)
    monkeypatch.setattr(distributed, "LINGER_SECONDS", 0.05)  # rank 0 went on: the error was this rank's alone
    assert main(ARGV) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error (rank 1): sparsity 1.5 is outside [0, 1): use e.g. 50% or 0.5"]


def test_who_speaks() -> None:
    error, lost = ToolkitError("bad input"), DistributedError("rank 0 died")
    assert distributed.speaks(True, error, {"RANK": "0"})
    assert not distributed.speaks(True, error, {"RANK": "1"})
    assert distributed.speaks(True, lost, {"RANK": "1"})  # a rank's own trouble is its to say
    assert distributed.speaks(False, error, {"RANK": "1"})  # without --distributed RANK means nothing
    assert distributed.speaks(True, error, {})  # outside torchrun
    assert distributed.speaks(True, error, {"RANK": "x"})
    assert distributed.launch_rank({"RANK": "3"}) == 3 and distributed.launch_rank({}) is None
