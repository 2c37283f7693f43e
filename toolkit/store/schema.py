"""What a run folder's files must hold, checked by every reader (no torch).

A reader of the run store is total: a file that is missing, truncated, half-written, not UTF-8,
not JSON, of the wrong JSON type, a directory, unreadable (permission), not a regular file (a named
pipe), a link out of its run folder, too large or nested too deep (:mod:`toolkit.store.reader`)
never raises out of a listing and never blocks it. Each check returns the reason a file is
unusable (``""`` when it is fine); the record then reads as ``damaged`` with that reason, and only
that run is affected.

The schema (both store layouts, 1 and 2):

- ``config.json``: an object; ``model``, ``method`` strings, ``options`` and ``compression``
  objects, ``sparsity`` a string or null, when present.
- ``status.json``: an object; ``status`` one of the statuses, ``error`` a string, ``pid`` an
  integer. A ``running`` status needs a pid > 1 (0 and 1 name a process group and init, which
  are always alive).
- ``result.json`` (finished runs): an object; ``ppl`` and ``dense_ppl`` objects of numbers (or
  null), ``achieved_sparsity`` and ``prune_seconds`` numbers, ``layers`` a list, ``masks`` the
  number of keep-masks written (from the schema-2 writer on).
- ``events.jsonl`` of a finished run ends with its ``RunFinished`` line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from toolkit.store import reader
from toolkit.store.reader import Budget

WRITTEN_STATUSES = ("running", "finished", "failed", "cancelled")
PID_MAX = 2**22  # Linux's largest pid (/proc/sys/kernel/pid_max); anything above is not a process
_TAIL_BYTES = 1 << 16  # the last line of events.jsonl is read from this many trailing bytes


def read_json(path: Path, budget: Budget | None = None) -> tuple[Any, str]:
    """``(data, "")`` for a readable JSON file of the run folder ``path.parent``, ``(None, why)`` otherwise.

    Bounded (:mod:`toolkit.store.reader`): regular files only, a size and a nesting limit, the run's budget.
    """
    return reader.read_json(path, folder=path.parent, budget=budget)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_name(value: Any) -> str:
    return "null" if value is None else {dict: "an object", list: "a list", str: "a string"}.get(
        type(value), type(value).__name__)


def check_config(config: Any) -> str:
    """Why ``config`` (parsed config.json) is unusable, or ``""``."""
    if not isinstance(config, dict):
        return f"config.json holds {_type_name(config)}, not an object"
    for key, kinds in (("model", str), ("method", str), ("options", dict), ("compression", dict),
                       ("sparsity", str | None)):
        if key in config and not isinstance(config[key], kinds):
            return f"config.json {key!r} is {_type_name(config[key])}"
    return ""


def check_status(status: Any) -> str:
    """Why ``status`` (parsed status.json) is unusable, or ``""``."""
    if not isinstance(status, dict):
        return f"status.json holds {_type_name(status)}, not an object"
    if status.get("status") not in WRITTEN_STATUSES:
        return f"status.json status {status.get('status')!r} is not one of {', '.join(WRITTEN_STATUSES)}"
    if not isinstance(status.get("error", ""), str):
        return f"status.json error is {_type_name(status.get('error'))}"
    pid = status.get("pid")
    if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool)):
        return f"status.json pid {pid!r} is not a process id"
    return ""


def live_pid(status: dict[str, Any]) -> bool | None:
    """True/False: the writing process is alive/gone; None: no usable pid (0, 1, missing, out of range)."""
    pid = status.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or not 1 < pid <= PID_MAX:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    except OSError:
        return False
    return True


def check_result(result: Any) -> str:
    """Why ``result`` (parsed result.json) is unusable, or ``""``."""
    if not isinstance(result, dict):
        return f"result.json holds {_type_name(result)}, not an object"
    for key in ("ppl", "dense_ppl"):
        value = result.get(key, {})
        if not isinstance(value, dict):
            return f"result.json {key!r} is {_type_name(value)}, not an object"
        bad = [k for k, v in value.items() if v is not None and not _is_number(v)]
        if bad:
            return f"result.json {key}[{bad[0]!r}] is {_type_name(value[bad[0]])}, not a number"
    for key in ("achieved_sparsity", "prune_seconds"):
        if key in result and not _is_number(result[key]):
            return f"result.json {key!r} is {_type_name(result[key])}, not a number"
    if not isinstance(result.get("layers", []), list):
        return "result.json 'layers' is not a list"
    if "masks" in result and not (isinstance(result["masks"], int) and result["masks"] >= 0):
        return "result.json 'masks' is not a count"
    return ""


def last_event_kind(path: Path, budget: Budget | None = None) -> tuple[str, str]:
    """``(kind, "")`` of the last readable event in ``path`` (events.jsonl), or ``("", why)``."""
    tail, why = reader.read_bytes(path, tail=_TAIL_BYTES, budget=budget)
    if tail is None:
        return "", why
    for line in reversed(tail.splitlines()):  # a line typed by hand after the end is skipped, as replay skips it
        data, why = reader.parse_json(line, path.name)
        if why:
            continue
        kind = data.get("type") if isinstance(data, dict) else None
        if isinstance(kind, str):
            return kind, ""
    return "", "events.jsonl holds no readable event"


def check_finished(path: Path, result: dict[str, Any], mask_count: int, budget: Budget | None = None) -> str:
    """Why a run whose status is ``finished`` does not hold what a finished run holds, or ``""``."""
    kind, why = last_event_kind(path / "events.jsonl", budget)
    if why:
        return why
    if kind != "RunFinished":
        return f"events.jsonl ends with {kind}, not RunFinished (truncated?)"
    expected = result.get("masks")
    if isinstance(expected, int) and mask_count < expected:
        return f"{expected - mask_count} of {expected} mask files are missing"
    return ""
