"""A model path whose config.json is a named pipe or nested 200,000 deep gets one line, never a hang or a crash."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from toolkit.errors import ToolkitError
from toolkit.models.sources import check_model_source

DEEP = b"[" * 200_000 + b"]" * 200_000


def refusal(path: Path) -> str:
    """check_model_source's one line for ``path``, run in a thread that must end within a minute."""
    outcome: list[BaseException | None] = []

    def check() -> None:
        try:
            check_model_source(str(path))
            outcome.append(None)
        except BaseException as exc:  # the test reports whatever it was
            outcome.append(exc)

    worker = threading.Thread(target=check, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "check_model_source hung on the folder"
    assert outcome and isinstance(outcome[0], ToolkitError), outcome
    message = str(outcome[0])
    assert "\n" not in message
    return message


@pytest.mark.parametrize("run_folder", [True, False])
def test_a_config_that_is_a_named_pipe_is_refused_without_blocking(tmp_path: Path, run_folder: bool) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes on this system")
    if run_folder:
        (tmp_path / "status.json").write_text('{"status": "finished"}', encoding="utf-8")
    os.mkfifo(tmp_path / "config.json")
    assert "config.json" in refusal(tmp_path)


@pytest.mark.parametrize("run_folder", [True, False])
def test_a_config_nested_200000_deep_is_refused_in_one_line(tmp_path: Path, run_folder: bool) -> None:
    if run_folder:
        (tmp_path / "status.json").write_text('{"status": "finished"}', encoding="utf-8")
    (tmp_path / "config.json").write_bytes(DEEP)
    assert "nested deeper" in refusal(tmp_path)
