"""A calibration or evaluation text file is checked before any model loads; its token count before any run folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.cli.main import main
from toolkit.data.text import check_text_source
from toolkit.errors import ToolkitError


@pytest.mark.parametrize(("content", "words"), [
    (b"", "is empty (or only whitespace)"), (b" \n\t\n", "is empty (or only whitespace)"),
    (b"abc\x00def", "holds NUL bytes"), (b"caf\xe9", "is not valid utf-8"),
])
def test_a_bad_text_file_is_one_line(content: bytes, words: str, tmp_path: Path) -> None:
    path = tmp_path / "calib.txt"
    path.write_bytes(content)
    with pytest.raises(ToolkitError) as caught:
        check_text_source(str(path))
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_folder_or_a_missing_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "x.txt").mkdir()
    with pytest.raises(ToolkitError, match="is a folder, not a text file"):
        check_text_source(str(tmp_path / "x.txt"))
    with pytest.raises(ToolkitError, match="is not a known dataset or an existing file"):
        check_text_source(str(tmp_path / "missing.txt"))


@pytest.mark.parametrize(("content", "words"), [
    ("", "is empty"), ("short text", "the calibration text has 10 tokens, fewer than nsamples × seqlen = 4 × 32"),
])
def test_prune_refuses_a_calibration_text_without_a_run_folder(content: str, words: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    calib = tmp_path / "calib.txt"
    calib.write_text(content)
    store = tmp_path / "runs"
    assert main(["prune", "--model", "tiny-llama", "--calib", str(calib), "--nsamples", "4", "--seqlen", "32",
                 "--eval", "none", "--out", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err
    assert not store.exists() or not any(store.iterdir())
