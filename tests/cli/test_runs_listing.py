"""``python -m toolkit runs`` prints what a run folder holds, never obeys it: escapes are shown, not run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.hostile_store import CONFIG, ESC_CLEAR, ESC_TITLE, escape_named_run, make_escape_config
from tests.helpers.synthetic_runs import write_run
from toolkit.cli.main import main
from toolkit.cli.view import run_lines
from toolkit.store.runs import list_runs

RAW = ("\x1b", "\r", "\x07", "\x9b")


def test_escapes_in_a_folder_name_and_a_config_are_printed_escaped(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    good = write_run(tmp_path, CONFIG, seed=0)
    edited = write_run(tmp_path, CONFIG, seed=1)
    make_escape_config(edited)
    named = escape_named_run(tmp_path)
    assert main(["runs", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert not any(raw in out for raw in RAW)
    lines = out.splitlines()
    assert len(lines) == 3 and all("finished" in line for line in lines)  # one line a run, all three listed
    assert any(line.startswith(good.name) for line in lines)
    assert "tiny\\x1b]0;pwned\\x07" in out and "wanda\\x1b[2J\\x1b[H\\r" in out
    assert f"{named.name[:named.name.index(chr(27))]}\\x1b[31mred\\r\\x07" in out


def test_run_lines_escape_every_value(tmp_path: Path) -> None:
    run = write_run(tmp_path, {**CONFIG, "compression": {"label": f"50%{ESC_TITLE}"}, "model": ESC_CLEAR}, seed=0)
    (line,) = run_lines(list_runs(tmp_path))
    assert line.startswith(run.name) and "50%\\x1b]0;pwned\\x07" in line and "\\x1b[2J" in line
    assert not any(raw in line for raw in RAW)


@pytest.mark.skipif(os.name != "posix", reason="POSIX file names are bytes")
def test_a_folder_name_that_is_not_utf8_is_listed_escaped(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = write_run(tmp_path, CONFIG, seed=0)
    renamed = os.fsdecode(os.fsencode(run) + b"-\xff\xfe")
    os.rename(run, renamed)
    assert main(["runs", "--out", str(tmp_path)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"{run.name}-\\udcff\\udcfe") and "finished" in line


def test_listing_runs_never_imports_torch(tmp_path: Path) -> None:
    """The listing is a reader's job: a fresh ``runs`` process must not pay torch's seconds of import."""
    import subprocess
    import sys

    write_run(tmp_path, CONFIG, seed=0)
    code = ("import sys; from toolkit.cli.main import main; code = main(['runs', '--out', sys.argv[1]]); "
            "print('torch' in sys.modules); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"
