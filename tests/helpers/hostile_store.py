"""Run folders damaged the way a hostile or careless hand would (no torch): for the store tests and bench_store.

Each ``make_*`` takes a finished run folder (:func:`tests.helpers.synthetic_runs.write_run`) and
damages one thing; :data:`DAMAGE` names each with the reason the listing must give.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from tests.helpers.synthetic_runs import write_run
from toolkit.store import reader

ESC_TITLE = "\x1b]0;pwned\x07"  # sets the terminal window's title
ESC_CLEAR = "\x1b[2J\x1b[H"  # clears the screen
CONFIG = {"model": "tiny-llama", "method": "wanda", "sparsity": "50%"}


def make_deep(path: Path, name: str = "status.json", levels: int = 200_000) -> None:
    """``name`` becomes ``levels`` nested lists (the stdlib parser raises RecursionError on it)."""
    (path / name).write_text("[" * levels + "]" * levels, encoding="utf-8")


def make_fifo(path: Path, name: str = "status.json") -> None:
    """``name`` becomes a named pipe no one writes to (a plain open for reading blocks forever)."""
    (path / name).unlink()
    os.mkfifo(path / name)


def make_huge(path: Path, name: str = "status.json") -> None:
    """``name`` becomes a sparse file one byte over the reader's JSON limit (no disk space used)."""
    with open(path / name, "wb") as handle:
        handle.truncate(reader.JSON_BYTES + 1)


def make_link_out(path: Path, name: str = "result.json") -> None:
    """``name`` becomes a symbolic link to a file outside the run folder."""
    outside = path.parent.parent / f"outside-{path.name}.json"
    outside.write_text('{"ppl": {}}', encoding="utf-8")
    (path / name).unlink()
    (path / name).symlink_to(outside)


def make_non_utf8(path: Path, name: str = "config.json") -> None:
    """``name`` holds bytes that are not UTF-8."""
    (path / name).write_bytes(b'{"model": "\xff\xfe"}')


def make_truncated(path: Path, name: str = "result.json") -> None:
    """``name`` loses its last 20 bytes (a crash mid-write)."""
    data = (path / name).read_bytes()
    (path / name).write_bytes(data[:-20])


def make_escape_config(path: Path) -> None:
    """config.json's model and method carry terminal escape sequences (the run stays finished)."""
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    config.update(model=f"tiny{ESC_TITLE}", method=f"wanda{ESC_CLEAR}\r")
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")


def escape_named_run(root: Path, seed: int = 7) -> Path:
    """A finished run whose folder name holds an escape sequence, a carriage return and a bell."""
    path = write_run(root, CONFIG, seed=seed)
    renamed = path.with_name(f"{path.name}-\x1b[31mred\r\x07")
    path.rename(renamed)
    return renamed


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "deep-status": (make_deep, "status.json nested deeper than 64 levels"),
    "deep-config": (lambda p: make_deep(p, "config.json", 1000), "config.json nested deeper than 64 levels"),
    "fifo-status": (make_fifo, "status.json is not a regular file (a named pipe)"),
    "fifo-events": (lambda p: make_fifo(p, "events.jsonl"), "events.jsonl is not a regular file (a named pipe)"),
    "huge-status": (make_huge, f"status.json is {reader.JSON_BYTES + 1:,} bytes, over the {reader.JSON_BYTES:,}"),
    "link-out": (make_link_out, "result.json is a link that leaves the run folder"),
    "non-utf8-config": (make_non_utf8, "config.json is not UTF-8 text (byte 11)"),
    "truncated-result": (make_truncated, "result.json is not valid JSON (truncated?"),
}
