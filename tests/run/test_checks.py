"""Sequence lengths are checked against the model's positions before anything runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.cli.main import main
from toolkit.errors import ToolkitError
from toolkit.models.load import load_model
from toolkit.models.sources import TINY_FAMILIES
from toolkit.run.checks import check_context, max_positions
from toolkit.store.runs import list_runs


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_every_tiny_family_has_512_positions(family: str) -> None:
    loaded = load_model(f"tiny-{family}")
    assert max_positions(loaded.model) == 512  # OPT's table has 514 rows, 2 of them its offset
    check_context(loaded, 512, 512)
    with pytest.raises(ToolkitError, match=f"--eval-seqlen 513 exceeds tiny-{family}'s 512 positions; use at most 512"):
        check_context(loaded, 512, 513)


def test_prune_with_a_too_long_eval_window_fails_before_anything_runs(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "toolkit", "prune", "--model", "tiny-llama", "--nsamples", "2",
                           "--seqlen", "64", "--eval-seqlen", "100000", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2], check=False)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == ["error: --eval-seqlen 100000 exceeds tiny-llama's 512 positions; use at most 512"]
    assert list_runs(out) == []  # refused before the run store was touched, let alone pruning


def test_eval_command_refuses_a_too_long_window(capsys: pytest.CaptureFixture) -> None:
    assert main(["eval", "--model", "tiny-opt", "--seqlen", "600", "--windows", "1"]) == 2
    assert "--seqlen 600 exceeds tiny-opt's 512 positions" in capsys.readouterr().err
