"""Bounded reads of a run folder's files: no file in the store can hang, exhaust or blind a reader.

Every reader of the run store (the CLI's ``runs``, the app's Runs tab, the sweep's reuse, Compare,
the notebook widgets) reads a run's files through this module, so one bad file costs at most one
``damaged`` row with its reason. A read is refused, with a one-line reason, when the file

- is not a regular file (a named pipe, a socket, a device, a directory): it is opened with
  ``O_NONBLOCK`` and checked with ``fstat`` before any byte is read, so a FIFO never blocks;
- resolves outside its run folder (a symbolic link, or a linked ``masks/`` folder, that leaves it);
- is larger than its limit (:data:`JSON_BYTES` for the JSON files, :data:`EVENTS_BYTES` for
  ``events.jsonl``, :data:`ARRAY_BYTES` for a mask or quantization ``.npz``);
- is JSON nested deeper than :data:`MAX_DEPTH` levels: the brackets are counted outside strings
  before :func:`json.loads` runs (no recursion), and a ``RecursionError`` is a reason too;
- or when the run's :class:`Budget` (:data:`RUN_SECONDS` of reading for one run) is spent: it is
  checked before each file and between chunks of a large one. A system call that never returns
  (a hung network mount) is not interrupted; every other read ends.

Torch-free (numpy only counts brackets).
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path
from typing import Any

import numpy as np

JSON_BYTES = 16 * 2**20  # config, status, result, structure: a 70B run's result.json is well under 1 MiB
EVENTS_BYTES = 2**30  # events.jsonl of a long solver trace
ARRAY_BYTES = 4 * 2**30  # one linear's keep-mask or quantization state (.npz)
MAX_DEPTH = 64  # the store's own files nest 5 levels at most
RUN_SECONDS = 5.0  # reading one run's files; a listing of a healthy run takes milliseconds
_CHUNK = 1 << 20
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a JSON string, escapes included
_OPEN = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


class Budget:
    """The time one run's reads may take (:data:`RUN_SECONDS` by default), counted from its creation."""

    def __init__(self, seconds: float = RUN_SECONDS) -> None:
        self.seconds = seconds
        self._deadline = time.monotonic() + seconds

    def spent(self) -> bool:
        """True once the time is up."""
        return time.monotonic() > self._deadline

    def why(self) -> str:
        """The damaged row's reason."""
        return f"reading the run took over {self.seconds:g} s (a slow or unresponsive disk?)"


def _kind(mode: int) -> str:
    for test, words in ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
                        (stat.S_ISBLK, "a device")):
        if test(mode):
            return words
    return "a special file"


def _name(path: Path, folder: Path) -> str:
    try:
        return path.relative_to(folder).as_posix()
    except ValueError:
        return path.name


def _inside(path: Path, folder: Path) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(folder)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def read_bytes(path: Path, *, folder: Path | None = None, limit: int = JSON_BYTES, tail: int = 0,
               budget: Budget | None = None) -> tuple[bytes | None, str]:
    """``(bytes, "")`` of a regular file inside ``folder`` (default: its parent), or ``(None, why)``.

    ``tail`` > 0 reads only the last ``tail`` bytes (the size limit then does not apply). Never
    blocks on a named pipe and never raises for anything the file system holds.
    """
    folder = path.parent if folder is None else folder
    name = _name(path, folder)
    if budget is not None and budget.spent():
        return None, budget.why()
    if not _inside(path, folder):
        return None, f"{name} is a link that leaves the run folder"
    try:
        fd = os.open(path, _OPEN)
    except FileNotFoundError:
        return None, f"{name} is missing"
    except IsADirectoryError:
        return None, f"{name} is a directory, not a file"
    except PermissionError:
        return None, f"{name} is not readable (permission denied)"
    except OSError as exc:
        return None, f"{name} is not readable ({exc.strerror or exc})"
    try:
        return _read_open(fd, name, limit, tail, budget)
    except OSError as exc:
        return None, f"{name} is not readable ({exc.strerror or exc})"
    finally:
        os.close(fd)


def _read_open(fd: int, name: str, limit: int, tail: int, budget: Budget | None) -> tuple[bytes | None, str]:
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        return None, f"{name} is a directory, not a file"
    if not stat.S_ISREG(info.st_mode):
        return None, f"{name} is not a regular file ({_kind(info.st_mode)})"
    if tail:
        os.lseek(fd, max(0, info.st_size - tail), os.SEEK_SET)
        limit = tail
    elif info.st_size > limit:
        return None, f"{name} is {info.st_size:,} bytes, over the {limit:,} a run file may hold"
    chunks, total = [], 0
    while total <= limit:
        if budget is not None and budget.spent():
            return None, budget.why()
        chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > limit and not tail:  # it grew while being read
        return None, f"{name} grew past the {limit:,} bytes a run file may hold while it was read"
    return b"".join(chunks), ""


def nesting_depth(raw: bytes) -> int:
    """How deep arrays and objects nest in JSON text ``raw`` (brackets inside strings not counted).

    Counted without recursion (a running sum over the brackets), so any depth is measured safely.
    """
    bare = np.frombuffer(_STRING.sub(b"", raw), dtype=np.uint8)
    step = ((bare == ord("[")) | (bare == ord("{"))).astype(np.int64) - ((bare == ord("]")) | (bare == ord("}")))
    return int(np.cumsum(step).max(initial=0))


def parse_json(raw: bytes, name: str) -> tuple[Any, str]:
    """``(data, "")`` for UTF-8 JSON text ``raw`` nested at most :data:`MAX_DEPTH` deep, else ``(None, why)``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"{name} is not UTF-8 text (byte {exc.start})"
    if not text.strip():
        return None, f"{name} is empty (half-written?)"
    opened = raw.count(b"[") + raw.count(b"{")  # a text cannot nest deeper than the brackets it opens
    if opened > MAX_DEPTH and nesting_depth(raw) > MAX_DEPTH:
        return None, f"{name} nested deeper than {MAX_DEPTH} levels"
    try:
        return json.loads(text), ""
    except RecursionError:
        return None, f"{name} nested deeper than this reader can follow"
    except ValueError as exc:
        return None, f"{name} is not valid JSON (truncated? {exc})"


def read_json(path: Path, *, folder: Path | None = None, budget: Budget | None = None) -> tuple[Any, str]:
    """``(data, "")`` for a readable JSON file of a run folder, ``(None, why)`` for anything else."""
    raw, why = read_bytes(path, folder=folder, budget=budget)
    if raw is None:
        return None, why
    return parse_json(raw, _name(path, path.parent if folder is None else folder))


def json_lines(raw: bytes) -> list[tuple[int, Any, str]]:
    """``(line number, data, why)`` of each non-blank line of JSON-lines text (``data`` None where ``why``)."""
    parsed = []
    for number, line in enumerate(raw.splitlines(), 1):
        if line.strip():
            data, why = parse_json(line, "the line")
            parsed.append((number, data, why))
    return parsed
