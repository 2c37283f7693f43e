"""Every case of the bad-input catalogue (tests/helpers/bad_inputs.py): its exit code, one line, no traceback.

A refusal is the only non-blank line on stderr, starting ``error:``, with nothing on stdout and no
finished run in the store; a damaged store gives exactly one stdout line with the reason and nothing
on stderr. docs/bad_input.md must hold the case's row (its words, command and exit code) with the
line's substring (``python -m benchmarks.bad_input_doc`` regenerates the page).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.bad_input_doc import PAGE, row
from tests.helpers.bad_inputs import CASES, BadInput, run_case
from toolkit.store.runs import list_runs

PARAMS = [pytest.param(case, id=case.name, marks=[pytest.mark.slow] if case.slow else []) for case in CASES]


def test_case_names_are_unique() -> None:
    names = [case.name for case in CASES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("case", PARAMS)
def test_bad_input_is_one_clear_line(case: BadInput, tmp_path: Path) -> None:
    if "fifo" in case.name and not hasattr(os, "mkfifo"):
        pytest.skip("named pipes are POSIX only")
    outcome = run_case(case, tmp_path)
    assert "Traceback" not in outcome.err and "Traceback" not in outcome.out
    assert outcome.code == case.code, outcome.err
    if case.stream == "stderr":
        (line,) = outcome.lines("stderr")
        assert line.startswith("error: ") and case.says in line and not outcome.out.strip()
        assert not any(r.status == "finished" for r in list_runs(tmp_path / "runs"))
    else:
        assert len([line for line in outcome.lines("stdout") if case.says in line]) == 1 and not outcome.err.strip()
        assert "\x1b" not in outcome.out and "\r" not in outcome.out and "\x07" not in outcome.out
    start = row(case, outcome.code, "").rsplit("|", 2)[0]  # case, command and exit code
    rows = [line for line in PAGE.read_text(encoding="utf-8").splitlines() if line.startswith(start)]
    assert len(rows) == 1 and case.says.replace("|", "\\|") in rows[0], (
        f"docs/bad_input.md has no row for {case.name} as it runs now: run python -m benchmarks.bad_input_doc")
