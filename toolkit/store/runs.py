"""The run store on disk (no torch: the UIs read it directly).

::

    runs/<id>/config.json     what was asked (model, method, options, compression, protocol), "schema": 2
    runs/<id>/status.json     {"status": running|finished|failed|cancelled, "error", "pid"}
    runs/<id>/events.jsonl    every event, one JSON object a line, in order, stamped with "at_s"
    runs/<id>/masks/L<layer>__<linear>.npz   keep-mask bit-packed with np.packbits (+ shape)
    runs/<id>/quant/L<layer>__<linear>.npz   quantization state: codes (uint8), scales, zeros
                                              (float32, (out, groups)), bits, group_size, symmetric
    runs/<id>/structure.json  {"schema": 2, "changes": [...]}: structure changes of a block-scope method
    runs/<id>/result.json     written last and only by a finished run, "schema": 2
    runs/<id>/model/          the pruned checkpoint (safetensors) when asked for

Schema 2 stores the compression spec as data (``config["compression"]``: label, kind, sparsity,
quant, unit) so readers never parse strings; schema-1 runs (no ``schema`` field, only the
``sparsity`` text) still open, replay and compare: :attr:`RunRecord.compression` parses their
text once, and they simply have no ``quant/`` or ``structure.json``.

A run that died without a word (killed process) keeps ``running`` with a pid that no longer
exists (or none usable): it is reported as ``interrupted``. Every reader is total: a damaged file
(:mod:`toolkit.store.schema`) makes that one record ``damaged`` with the reason as its error, and a
failed run whose compression finished keeps its result.json and masks. Nothing here unpickles:
masks and quantization states load with ``allow_pickle=False``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from toolkit.errors import ToolkitError
from toolkit.events import Event, RunWarning, event_from_dict
from toolkit.spec.compression import parse_compression
from toolkit.store.schema import (
    WRITTEN_STATUSES,
    check_config,
    check_finished,
    check_result,
    check_status,
    last_event_kind,
    live_pid,
    read_json,
)

STATUSES = (*WRITTEN_STATUSES, "interrupted", "damaged")  # the last two are read, never written
STAMP = "at_s"  # on each events.jsonl line: seconds since the run record was created (absent in older runs)
SCHEMA = 2  # the layout this module writes; readers accept 1 and 2


@dataclass(frozen=True)
class StoredQuant:
    """A linear's quantization state as stored.

    Codes (out, in) uint8, scales and zero points (out, groups) float32, and the grid (dequantized
    ŵ = (codes − zeros) · scales per group).
    """

    codes: np.ndarray
    scales: np.ndarray
    zeros: np.ndarray
    bits: int
    group_size: int
    symmetric: bool


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text).strip("-")


def _mask_file(layer: int, name: str) -> str:
    return f"L{layer:03d}__{name}.npz"


class RunWriter:
    """Writes one run as it happens (schema :data:`SCHEMA`); :meth:`finish` / :meth:`fail` close it."""

    def __init__(self, root: str | Path, config: dict[str, Any]) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        raw = config.get("compression")
        compression = raw if isinstance(raw, dict) else {}
        what = compression.get("label") or config.get("sparsity", "")
        run_id = f"{stamp}-{_slug(config.get('method', 'run'))}-{_slug(str(what))}-{secrets.token_hex(2)}"
        self.path = Path(root) / run_id
        (self.path / "masks").mkdir(parents=True)
        self.run_id = run_id
        self._structure: list[dict[str, Any]] = []
        self.masks_written = 0
        _write_json(self.path / "config.json", {**config, "schema": SCHEMA})
        self._status("running")
        self._opened = time.monotonic()
        self._events = open(self.path / "events.jsonl", "a", encoding="utf-8")  # noqa: SIM115 - closed in finish/fail

    def _status(self, status: str, error: str = "") -> None:
        _write_json(self.path / "status.json", {"status": status, "error": error, "pid": os.getpid()})

    def event(self, event: Event) -> None:
        """Append one event (flushed, so a live reader sees it), stamped with :data:`STAMP`.

        The stamp is when the event was written, which is when a live consumer received it (the run
        writes, then emits): a replay folds each event at its stamp and shows the elapsed time the
        live run showed.
        """
        line = {**event.to_dict(), STAMP: round(time.monotonic() - self._opened, 3)}
        self._events.write(json.dumps(line) + "\n")
        self._events.flush()

    def mask(self, layer: int, name: str, keep_mask: np.ndarray) -> None:
        """Store a keep-mask (bool, (out, in)) bit-packed."""
        keep = np.asarray(keep_mask, dtype=bool)
        np.savez(self.path / "masks" / _mask_file(layer, name), bits=np.packbits(keep.ravel()),
                 shape=np.array(keep.shape))
        self.masks_written += 1

    def quant(self, layer: int, name: str, state: StoredQuant) -> None:
        """Store a linear's quantization state (codes, scales, zeros and the grid) beside its mask."""
        folder = self.path / "quant"
        folder.mkdir(exist_ok=True)
        np.savez(folder / _mask_file(layer, name), codes=np.asarray(state.codes, dtype=np.uint8),
                 scales=np.asarray(state.scales, dtype=np.float32), zeros=np.asarray(state.zeros, dtype=np.float32),
                 bits=np.array(state.bits), group_size=np.array(state.group_size), symmetric=np.array(state.symmetric))

    def structure(self, change: dict[str, Any]) -> None:
        """Append one structure change (plain data: layer, units kept, new shapes) to structure.json."""
        self._structure.append(change)
        _write_json(self.path / "structure.json", {"schema": SCHEMA, "changes": self._structure})

    def write_result(self, result: dict[str, Any]) -> None:
        """Write result.json (what the compression did; the status still says whether the run finished)."""
        _write_json(self.path / "result.json", {**result, "masks": self.masks_written, "schema": SCHEMA})

    def finish(self, result: dict[str, Any]) -> None:
        """Write result.json, then mark the run finished."""
        self._events.close()
        self.write_result(result)
        self._status("finished")

    def fail(self, error: str, cancelled: bool, keep_result: bool = False) -> None:
        """Mark the run failed or cancelled; remove anything that would claim success.

        ``keep_result`` keeps a result.json written after the compression finished (a later step such as
        evaluation failed). Best effort when the disk is full: status.json is written in place if the
        atomic write fails, and a reader tells a dead writer's ``running`` as ``interrupted``.
        """
        if not self._events.closed:
            with contextlib.suppress(OSError):  # the tail could not be flushed (disk full): the reader flags it
                self._events.close()
        if not keep_result:
            (self.path / "result.json").unlink(missing_ok=True)
        status = "cancelled" if cancelled else "failed"
        try:
            self._status(status, error)
        except OSError:
            (self.path / "status.tmp").unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # nothing can be written: the dead pid then reads as interrupted
                (self.path / "status.json").write_text(json.dumps({"status": status, "error": error[:200]}))


def _stamp(data: Any) -> float:
    """The line's :data:`STAMP` as a float; nan when absent or not a finite number (older or hand-edited runs)."""
    value = data.get(STAMP) if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return math.nan
    return float(value)


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
        tmp.replace(path)  # atomic: a reader never sees half a file
    except OSError:
        tmp.unlink(missing_ok=True)  # no half-written leftover (e.g. disk full)
        raise


def _keys(folder: Path) -> list[tuple[int, str]]:
    """(layer, linear) of every ``L<layer>__<linear>.npz`` in ``folder``; other names are not ours and are left out."""
    keys = []
    for file in _mask_files(folder.parent, folder.name):
        layer, name = file.stem.split("__", 1)
        if layer[1:].isdigit() and name:
            keys.append((int(layer[1:]), name))
    return sorted(keys)


def _mask_files(path: Path, kind: str = "masks") -> list[Path]:
    try:
        return sorted(file for file in (path / kind).glob("L*__*.npz") if file.is_file())
    except OSError:
        return []


@dataclass
class RunRecord:
    """A run read back from the store."""

    path: Path
    config: dict[str, Any]
    status: str
    error: str
    result: dict[str, Any] | None

    @property
    def run_id(self) -> str:
        """The folder name."""
        return self.path.name

    @property
    def schema(self) -> int:
        """The store layout the run was written in (1 for runs from before the field existed)."""
        value = self.config.get("schema", 1) if isinstance(self.config, dict) else 1
        return value if isinstance(value, int) else 1

    @property
    def compression(self) -> dict[str, Any]:
        """The compression spec as plain data: label, kind, sparsity, quant, unit.

        Schema 2 stores it; for a schema-1 run it is derived once from the stored ``sparsity`` text
        (:func:`toolkit.spec.compression.parse_compression`, imported only then). A record whose text does not
        parse gets ``kind`` "unknown" and its text as the label.
        """
        config = self.config if isinstance(self.config, dict) else {}
        stored = config.get("compression")
        if isinstance(stored, dict):
            return stored
        text = config.get("sparsity")
        if text is None:  # a damaged record (its config unread) or a foreign folder
            return {"label": "?", "kind": "unknown", "sparsity": None, "quant": None, "unit": None}

        try:
            return parse_compression(text).to_dict()
        except (ValueError, TypeError):
            return {"label": str(text), "kind": "unknown", "sparsity": None, "quant": None, "unit": None}

    @property
    def label(self) -> str:
        """The compression as a user would type it (``50%``, ``2:4+int4:g128``)."""
        return str(self.compression.get("label", "?"))

    def events(self) -> list[Event]:
        """Every event of the run, in order (lines that do not parse are skipped with a Warning)."""
        return list(self.iter_events())

    def iter_events(self) -> Iterator[Event]:
        """Events of the run; unparseable lines (a hand-edited file) become a Warning event."""
        return (event for _, event in self.timed_events())

    def timed_events(self) -> Iterator[tuple[float, Event]]:
        """``(seconds since the record was created, event)`` in order; nan where a line has no stamp.

        Lines that do not parse become a Warning event (its time nan); a missing events.jsonl gives
        nothing.
        """
        path = self.path / "events.jsonl"
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            yield math.nan, RunWarning(message=f"events.jsonl is not readable ({exc.strerror or exc})")
            return
        for number, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line.decode("utf-8"))
                yield _stamp(data), event_from_dict(data)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                yield math.nan, RunWarning(message=f"events.jsonl line {number} unreadable: {exc}")

    def mask_names(self) -> list[tuple[int, str]]:
        """(layer, linear) of every stored keep-mask, sorted."""
        return _keys(self.path / "masks")

    def quant_names(self) -> list[tuple[int, str]]:
        """(layer, linear) of every stored quantization state, sorted (none in schema-1 runs)."""
        return _keys(self.path / "quant")

    def load_quant(self, layer: int, name: str) -> StoredQuant:
        """The stored quantization state of one linear."""
        file = self.path / "quant" / _mask_file(layer, name)
        if not file.exists():
            raise ToolkitError(f"run {self.run_id} has no quantization state for layer {layer} {name}")
        try:
            with np.load(file, allow_pickle=False) as data:
                return StoredQuant(codes=data["codes"], scales=data["scales"], zeros=data["zeros"],
                                   bits=int(data["bits"]), group_size=int(data["group_size"]),
                                   symmetric=bool(data["symmetric"]))
        except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as exc:
            raise ToolkitError(f"run {self.run_id}: quantization file {file.name} is damaged ({exc})") from None

    def structure(self) -> list[dict[str, Any]]:
        """The structure changes of a block-scope run, in order (empty otherwise and in schema-1 runs)."""
        file = self.path / "structure.json"
        if not file.exists():
            return []
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
            changes = data["changes"]
            if not isinstance(changes, list) or not all(isinstance(c, dict) for c in changes):
                raise TypeError("'changes' is not a list of objects")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ToolkitError(f"run {self.run_id}: structure.json is damaged ({exc})") from None
        return list(changes)

    def load_mask(self, layer: int, name: str) -> np.ndarray:
        """The keep-mask (out, in) bool of one linear."""
        file = self.path / "masks" / _mask_file(layer, name)
        if not file.exists():
            raise ToolkitError(f"run {self.run_id} has no mask for layer {layer} {name}")
        try:
            with np.load(file, allow_pickle=False) as data:
                shape = tuple(int(s) for s in data["shape"])
                packed = data["bits"]
                size = int(np.prod(shape))
                if len(shape) != 2 or min(shape) < 0 or packed.dtype != np.uint8 or packed.ndim != 1 \
                        or packed.size != (size + 7) // 8:
                    raise ValueError(f"{packed.size} packed bytes do not hold an (out, in) mask of shape {shape}")
                bits = np.unpackbits(packed, count=size)
        except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as exc:
            raise ToolkitError(f"run {self.run_id}: mask file {file.name} is damaged ({exc}); "
                               "the run's masks cannot be used, pick another run") from None
        return bits.astype(bool).reshape(shape)


def open_run(path: str | Path) -> RunRecord:
    """Read one run folder; never raises for a damaged one (CONTRIBUTING.md: readers are total).

    A file that is missing, truncated, not UTF-8, not JSON, of the wrong type or unreadable makes the
    record ``damaged`` with the reason in :attr:`RunRecord.error` (:mod:`toolkit.store.schema`). Raises
    :class:`ToolkitError` only when ``path`` is not a folder at all.
    """
    path = Path(path)
    if not path.is_dir():
        why = "a file" if path.exists() else "no such folder: deleted?"
        raise ToolkitError(f"{path} is not a run folder ({why}); press Refresh or pick another run")
    config, why = read_json(path / "config.json")
    why = why or check_config(config)
    if why:
        return RunRecord(path=path, config={}, status="damaged", error=why, result=None)
    status_data, why = read_json(path / "status.json")
    why = why or check_status(status_data)
    if why:
        return RunRecord(path=path, config=config, status="damaged", error=why, result=None)
    status, error = status_data["status"], status_data.get("error", "")
    if status == "running":
        alive = live_pid(status_data)
        if not alive and last_event_kind(path / "events.jsonl")[0] == "RunFinished":
            status = "finished"  # RunFinished is the last thing a run writes: only the status write was lost
        elif not alive:
            status = "interrupted"
            error = error or ("the process that wrote it is gone" if alive is False
                              else "status.json names no live process (no valid pid)")
    result = None
    if status == "finished" or (status in ("failed", "cancelled") and (path / "result.json").exists()):
        result, why = read_json(path / "result.json")
        why = why or check_result(result)
        if not why and status == "finished":
            why = check_finished(path, result, len(_mask_files(path)))
        if why:
            return RunRecord(path=path, config=config, status="damaged", error=why, result=None)
    return RunRecord(path=path, config=config, status=status, error=error, result=result)


def list_runs(root: str | Path = "runs") -> list[RunRecord]:
    """Every run folder under ``root``, newest first; a damaged one is a ``damaged`` record, never an error.

    Files (not folders) under ``root`` are not runs and are left out; a ``root`` that does not exist
    or cannot be listed gives an empty list (the CLI says why before calling this).
    """
    root = Path(root)
    try:
        folders = sorted((p for p in root.iterdir() if p.is_dir()), reverse=True)
    except OSError:
        return []
    return [open_run(path) for path in folders]


def find_finished(root: str | Path, key: dict[str, Any]) -> RunRecord | None:
    """The newest finished run whose config matches every item of ``key`` (for sweep reuse)."""
    for record in list_runs(root):
        if record.status == "finished" and all(record.config.get(k) == v for k, v in key.items()):
            return record
    return None
