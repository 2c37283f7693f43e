"""The run store on disk (no torch: the UIs read it directly).

::

    runs/<id>/config.json     what was asked (model, method, options, compression, protocol), "schema": 2
    runs/<id>/status.json     {"status": running|finished|failed|cancelled, "error", "pid"}
    runs/<id>/events.jsonl    every event, one JSON object a line, in order
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
exists: it is reported as ``interrupted``. Nothing here unpickles: masks and quantization states
load with ``allow_pickle=False``.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from toolkit.errors import ToolkitError
from toolkit.events import Event, event_from_dict

STATUSES = ("running", "finished", "failed", "cancelled", "interrupted")
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
        _write_json(self.path / "config.json", {**config, "schema": SCHEMA})
        self._status("running")
        self._events = open(self.path / "events.jsonl", "a", encoding="utf-8")  # noqa: SIM115 - closed in finish/fail

    def _status(self, status: str, error: str = "") -> None:
        _write_json(self.path / "status.json", {"status": status, "error": error, "pid": os.getpid()})

    def event(self, event: Event) -> None:
        """Append one event (flushed, so a live reader sees it)."""
        self._events.write(json.dumps(event.to_dict()) + "\n")
        self._events.flush()

    def mask(self, layer: int, name: str, keep_mask: np.ndarray) -> None:
        """Store a keep-mask (bool, (out, in)) bit-packed."""
        keep = np.asarray(keep_mask, dtype=bool)
        np.savez(self.path / "masks" / _mask_file(layer, name), bits=np.packbits(keep.ravel()),
                 shape=np.array(keep.shape))

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
        """Write result.json while the run goes on (the pruning is done; evaluations of it may follow)."""
        _write_json(self.path / "result.json", {**result, "schema": SCHEMA})

    def finish(self, result: dict[str, Any]) -> None:
        """Write result.json, then mark the run finished."""
        self._events.close()
        self.write_result(result)
        self._status("finished")

    def fail(self, error: str, cancelled: bool) -> None:
        """Mark the run failed or cancelled; remove anything that would claim success."""
        if not self._events.closed:
            self._events.close()
        for leftover in ("result.json",):
            (self.path / leftover).unlink(missing_ok=True)
        self._status("cancelled" if cancelled else "failed", error)


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    tmp.replace(path)  # atomic: a reader never sees half a file


def _key(file: Path) -> tuple[int, str]:
    layer, name = file.stem.split("__", 1)
    return int(layer[1:]), name


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


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
        (:func:`toolkit.spec.parse_compression`, imported only then). A record whose text does not
        parse gets ``kind`` "unknown" and its text as the label.
        """
        config = self.config if isinstance(self.config, dict) else {}
        stored = config.get("compression")
        if isinstance(stored, dict):
            return stored
        text = config.get("sparsity")
        from toolkit.spec import parse_compression

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
        from toolkit.events import RunWarning

        path = self.path / "events.jsonl"
        if not path.exists():
            return
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                yield event_from_dict(json.loads(line))
            except (ValueError, TypeError, KeyError) as exc:
                yield RunWarning(message=f"events.jsonl line {number} unreadable: {exc}")

    def mask_names(self) -> list[tuple[int, str]]:
        """(layer, linear) of every stored keep-mask, sorted."""
        return [_key(file) for file in sorted((self.path / "masks").glob("L*__*.npz"))]

    def quant_names(self) -> list[tuple[int, str]]:
        """(layer, linear) of every stored quantization state, sorted (none in schema-1 runs)."""
        return [_key(file) for file in sorted((self.path / "quant").glob("L*__*.npz"))]

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
        except (OSError, ValueError, KeyError) as exc:
            raise ToolkitError(f"run {self.run_id}: quantization file {file.name} is damaged ({exc})") from None

    def structure(self) -> list[dict[str, Any]]:
        """The structure changes of a block-scope run, in order (empty otherwise and in schema-1 runs)."""
        file = self.path / "structure.json"
        if not file.exists():
            return []
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
            changes = data["changes"]
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
                bits = np.unpackbits(data["bits"], count=int(np.prod(shape)))
        except (OSError, ValueError, KeyError) as exc:
            raise ToolkitError(f"run {self.run_id}: mask file {file.name} is damaged ({exc})") from None
        return bits.astype(bool).reshape(shape)


def open_run(path: str | Path) -> RunRecord:
    """Read one run folder; a damaged record raises :class:`ToolkitError` saying which file."""
    path = Path(path)
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        status_data = json.loads((path / "status.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ToolkitError(f"{path} is not a readable run ({exc}); delete it or restore its files") from None
    status = str(status_data.get("status", "failed"))
    if status not in STATUSES:
        status = "failed"
    if status == "running" and not _pid_alive(int(status_data.get("pid", -1))):
        status = "interrupted"
    result = None
    if status == "finished":
        try:
            result = json.loads((path / "result.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            status = "failed"
    return RunRecord(path=path, config=config, status=status, error=str(status_data.get("error", "")), result=result)


def list_runs(root: str | Path = "runs") -> list[RunRecord]:
    """Every readable run under ``root``, newest first (unreadable folders are skipped)."""
    root = Path(root)
    if not root.is_dir():
        return []
    records = []
    for path in sorted(root.iterdir(), reverse=True):
        if path.is_dir():
            try:
                records.append(open_run(path))
            except ToolkitError:
                continue
    return records


def find_finished(root: str | Path, key: dict[str, Any]) -> RunRecord | None:
    """The newest finished run whose config matches every item of ``key`` (for sweep reuse)."""
    for record in list_runs(root):
        if record.status == "finished" and all(record.config.get(k) == v for k, v in key.items()):
            return record
    return None
