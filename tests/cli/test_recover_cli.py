"""`python -m toolkit recover` is a sub-command of the CLI: bad input is one line and exit 2, before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.cli.main import main


def test_recover_is_wired_and_refuses_a_folder_that_is_not_a_run(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recover", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "not a run folder" in err[0]
