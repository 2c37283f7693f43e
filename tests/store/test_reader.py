"""Bounded reads of run files: depth counted without recursion, regular files only, size and time limits."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from toolkit.store import reader


@pytest.mark.parametrize(("text", "depth"), [
    ("1", 0), ("[]", 1), ('{"a": [1, {"b": []}]}', 4), ('["[[[[", "]]"]', 1), ('["\\"[[["]', 1),
    ("[" * 200_000 + "]" * 200_000, 200_000),
])
def test_nesting_depth_counts_brackets_outside_strings(text: str, depth: int) -> None:
    assert reader.nesting_depth(text.encode()) == depth


def test_the_depth_limit_is_exact() -> None:
    limit = reader.MAX_DEPTH
    assert reader.parse_json(("[" * limit + "]" * limit).encode(), "x.json")[1] == ""
    data, why = reader.parse_json(("[" * (limit + 1) + "]" * (limit + 1)).encode(), "x.json")
    assert data is None and why == f"x.json nested deeper than {limit} levels"
    wide = json.dumps([[i] for i in range(1000)]).encode()  # many brackets, two levels: parsed
    assert reader.parse_json(wide, "x.json")[0][999] == [999]


@pytest.mark.parametrize(("raw", "why"), [
    (b"", "x.json is empty"), (b"\xff{}", "x.json is not UTF-8 text (byte 0)"),
    (b'{"a": 1', "x.json is not valid JSON"),
])
def test_parse_json_gives_a_reason(raw: bytes, why: str) -> None:
    data, reason = reader.parse_json(raw, "x.json")
    assert data is None and reason.startswith(why)


def test_read_bytes_limits(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_bytes(b"0123456789")
    assert reader.read_bytes(tmp_path / "a.json", limit=10) == (b"0123456789", "")
    assert reader.read_bytes(tmp_path / "a.json", limit=9)[1] == "a.json is 10 bytes, over the 9 a run file may hold"
    assert reader.read_bytes(tmp_path / "a.json", tail=3) == (b"789", "")
    assert reader.read_bytes(tmp_path / "gone.json") == (None, "gone.json is missing")
    (tmp_path / "d.json").mkdir()
    assert reader.read_bytes(tmp_path / "d.json")[1] == "d.json is a directory, not a file"
    spent = reader.Budget(-1.0)
    assert reader.read_bytes(tmp_path / "a.json", budget=spent) == (None, spent.why())


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes and devices are POSIX only")
def test_special_files_are_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.json")
    assert reader.read_bytes(tmp_path / "pipe.json") == (None, "pipe.json is not a regular file (a named pipe)")
    assert reader.read_bytes(Path("/dev/null")) == (None, "null is not a regular file (a device)")
    (tmp_path / "null.json").symlink_to("/dev/null")
    assert reader.read_bytes(tmp_path / "null.json") == (None, "null.json is a link that leaves the run folder")


def test_names_are_relative_to_the_run_folder(tmp_path: Path) -> None:
    (tmp_path / "masks").mkdir()
    data, why = reader.read_json(tmp_path / "masks" / "m.json", folder=tmp_path)
    assert data is None and why == "masks/m.json is missing"
