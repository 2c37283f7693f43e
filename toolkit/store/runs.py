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

import io
import math
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from toolkit.errors import ToolkitError
from toolkit.events import Event, RunWarning, event_from_dict
from toolkit.spec.compression import parse_compression
from toolkit.store import reader
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
from toolkit.store.writer import SCHEMA, STAMP, RunWriter, StoredQuant, mask_file

__all__ = ["SCHEMA", "STAMP", "STATUSES", "RunRecord", "RunWriter", "StoredQuant", "find_finished", "last_stamp",
           "list_runs", "open_run"]

STATUSES = (*WRITTEN_STATUSES, "interrupted", "damaged")  # the last two are read, never written


def _stamp(data: Any) -> float:
    """The line's :data:`STAMP` as a float; nan when absent or not a finite number (older or hand-edited runs)."""
    value = data.get(STAMP) if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return math.nan
    return float(value)


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
        raw, why = reader.read_bytes(self.path / "events.jsonl", folder=self.path, limit=reader.EVENTS_BYTES)
        if raw is None:
            if why != "events.jsonl is missing":
                yield math.nan, RunWarning(message=why)
            return
        for number, data, why in reader.json_lines(raw):
            try:
                if why:
                    raise ValueError(why)
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
        file = self.path / "quant" / mask_file(layer, name)
        if not file.exists():
            raise ToolkitError(f"run {self.run_id} has no quantization state for layer {layer} {name}")
        try:
            with self._npz(file) as data:
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
            data, why = reader.read_json(file, folder=self.path)
            if why:
                raise ValueError(why)
            changes = data["changes"]
            if not isinstance(changes, list) or not all(isinstance(c, dict) for c in changes):
                raise TypeError("'changes' is not a list of objects")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ToolkitError(f"run {self.run_id}: structure.json is damaged ({exc})") from None
        return list(changes)

    def _npz(self, file: Path) -> Any:
        """``np.load`` of a run's .npz, read through :func:`toolkit.store.reader.read_bytes` (bounded, no pickles)."""
        raw, why = reader.read_bytes(file, folder=self.path, limit=reader.ARRAY_BYTES)
        if raw is None:
            raise OSError(why)
        return np.load(io.BytesIO(raw), allow_pickle=False)

    def load_mask(self, layer: int, name: str) -> np.ndarray:
        """The keep-mask (out, in) bool of one linear."""
        file = self.path / "masks" / mask_file(layer, name)
        if not file.exists():
            raise ToolkitError(f"run {self.run_id} has no mask for layer {layer} {name}")
        try:
            with self._npz(file) as data:
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


def open_run(path: str | Path, budget: reader.Budget | None = None) -> RunRecord:
    """Read one run folder; never raises for a damaged one (CONTRIBUTING.md: readers are total).

    A file that is missing, truncated, not UTF-8, not JSON, of the wrong type, unreadable, not a
    regular file, a link out of the folder, too large or too deeply nested makes the record ``damaged``
    with the reason in :attr:`RunRecord.error` (:mod:`toolkit.store.schema`, :mod:`toolkit.store.reader`),
    as does a read that outlasts ``budget`` (default :data:`toolkit.store.reader.RUN_SECONDS`). Raises
    :class:`ToolkitError` only when ``path`` is not a folder at all.
    """
    path, budget = Path(path), budget or reader.Budget()
    if not path.is_dir():
        why = "a file" if path.exists() else "no such folder: deleted?"
        raise ToolkitError(f"{path} is not a run folder ({why}); press Refresh or pick another run")
    config, why = read_json(path / "config.json", budget)
    why = why or check_config(config)
    if why:
        return RunRecord(path=path, config={}, status="damaged", error=why, result=None)
    status_data, why = read_json(path / "status.json", budget)
    why = why or check_status(status_data)
    if why:
        return RunRecord(path=path, config=config, status="damaged", error=why, result=None)
    status, error = status_data["status"], status_data.get("error", "")
    if status == "running":
        alive = live_pid(status_data)
        if not alive and last_event_kind(path / "events.jsonl", budget)[0] == "RunFinished":
            status = "finished"  # RunFinished is the last thing a run writes: only the status write was lost
        elif not alive:
            status = "interrupted"
            error = error or ("the process that wrote it is gone" if alive is False
                              else "status.json names no live process (no valid pid)")
    result = None
    if status == "finished" or (status in ("failed", "cancelled") and (path / "result.json").exists()):
        result, why = read_json(path / "result.json", budget)
        why = why or check_result(result)
        if not why and status == "finished":
            why = check_finished(path, result, len(_mask_files(path)), budget)
        if why:
            return RunRecord(path=path, config=config, status="damaged", error=why, result=None)
    return RunRecord(path=path, config=config, status=status, error=error, result=result)


def list_runs(root: str | Path = "runs") -> list[RunRecord]:
    """Every run folder under ``root``, newest first; a damaged one is a ``damaged`` record, never an error.

    Files (not folders) under ``root`` are not runs and are left out, as is a folder deleted while the
    listing runs; a ``root`` that does not exist or cannot be listed gives an empty list (the CLI says
    why before calling this). Each run is read within its own budget, so a slow one delays only itself.
    """
    root = Path(root)
    try:
        folders = sorted((p for p in root.iterdir() if p.is_dir()), reverse=True)
    except OSError:
        return []
    records = []
    for path in folders:
        try:
            records.append(open_run(path))
        except ToolkitError:  # deleted since the folder was listed
            continue
    return records


def last_stamp(folder: str | Path) -> float:
    """The :data:`STAMP` of the last line of the run folder's events.jsonl (read from its tail, bounded), or nan."""
    folder = Path(folder)
    tail, _ = reader.read_bytes(folder / "events.jsonl", folder=folder, tail=8192)
    lines = reader.json_lines(tail or b"")
    return _stamp(lines[-1][1]) if lines else math.nan


def find_finished(root: str | Path, key: dict[str, Any]) -> RunRecord | None:
    """The newest finished run whose config matches every item of ``key`` (for sweep reuse)."""
    for record in list_runs(root):
        if record.status == "finished" and all(record.config.get(k) == v for k, v in key.items()):
            return record
    return None
