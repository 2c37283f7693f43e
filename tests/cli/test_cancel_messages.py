"""What the CLI says when stopped or failed: the state that exists, and docs/cli.md's exit codes.

A cancel before a run folder exists says nothing was recorded (never "the run is marked
cancelled"); a full disk while saving the checkpoint of a recorded run exits with 1 (a failure of
the machine), like every other failure of the machine.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolkit.cli.main import main
from toolkit.run import pipeline
from toolkit.store.runs import list_runs

NOTHING = "cancelled: stopped before a run was recorded; nothing was written and no model was changed"
TINY = ["--model", "tiny-llama", "--nsamples", "2", "--seqlen", "32"]


@pytest.fixture(autouse=True)
def _sigterm_restored() -> Iterator[None]:
    """main() makes SIGTERM raise KeyboardInterrupt; give the test process its handler back."""
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def _interrupt(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


def _said(capsys: pytest.CaptureFixture) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith(("cancelled", "error"))]


def test_ctrl_c_in_eval_says_nothing_was_recorded(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr("toolkit.evaluation.perplexity.perplexity", _interrupt)
    assert main(["eval", "--model", "tiny-llama", "--seqlen", "32", "--windows", "2"]) == 130
    assert _said(capsys) == [NOTHING]


def test_ctrl_c_in_prune_before_the_run_folder_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(pipeline, "load_model", _interrupt)
    assert main(["prune", *TINY, "--eval", "none", "--out", str(tmp_path)]) == 130
    said = _said(capsys)
    assert said == [NOTHING] and "marked cancelled" not in said[0]
    assert list_runs(tmp_path) == [] and not [p for p in tmp_path.iterdir() if p.is_dir()]


def test_sigterm_to_runs_says_nothing_was_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture) -> None:
    def terminated(root: Path) -> list[object]:
        os.kill(os.getpid(), signal.SIGTERM)  # main() turned SIGTERM into KeyboardInterrupt, raised here
        return []

    monkeypatch.setattr("toolkit.store.runs.list_runs", terminated)
    assert main(["runs", "--out", str(tmp_path)]) == 130
    assert _said(capsys) == [NOTHING]


def test_disk_full_while_saving_the_checkpoint_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture) -> None:
    def full(model: object, codec: object, folder: Path) -> Path:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder / "model.safetensors"))

    monkeypatch.setattr(pipeline, "save_shrunk", full)
    assert main(["prune", *TINY, "--eval", "none", "--out", str(tmp_path), "--save-model"]) == 1
    said = _said(capsys)
    (record,) = list_runs(tmp_path)
    assert len(said) == 1 and said[0].startswith("error: saving the checkpoint failed after the compression finished")
    assert os.strerror(errno.ENOSPC) in said[0] and "the masks are saved in" in said[0]
    assert record.status == "failed" and not (record.path / "model").exists()
