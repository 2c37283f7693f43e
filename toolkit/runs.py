"""The run store on disk (no torch: the UIs read it directly).

::

    runs/<id>/config.json     what was asked (model, method, options, sparsity, protocol)
    runs/<id>/status.json     {"status": running|finished|failed|cancelled, "error", "pid"}
    runs/<id>/events.jsonl    every event, one JSON object a line, in order
    runs/<id>/masks/L<layer>__<linear>.npz   keep-mask bit-packed with np.packbits (+ shape)
    runs/<id>/result.json     written last and only by a finished run
    runs/<id>/model/          the pruned checkpoint (safetensors) when asked for

A run that died without a word (killed process) keeps ``running`` with a pid that no longer
exists: it is reported as ``interrupted``. Nothing here unpickles: masks load with
``allow_pickle=False``.
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


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text).strip("-")


def _mask_file(layer: int, name: str) -> str:
    return f"L{layer:03d}__{name}.npz"


class RunWriter:
    """Writes one run as it happens; :meth:`finish` / :meth:`fail` close it."""

    def __init__(self, root: str | Path, config: dict[str, Any]) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_id = f"{stamp}-{_slug(config.get('method', 'run'))}-{_slug(str(config.get('sparsity', '')))}-{secrets.token_hex(2)}"
        self.path = Path(root) / run_id
        (self.path / "masks").mkdir(parents=True)
        self.run_id = run_id
        _write_json(self.path / "config.json", config)
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
        np.savez(self.path / "masks" / _mask_file(layer, name), bits=np.packbits(keep.ravel()), shape=np.array(keep.shape))

    def finish(self, result: dict[str, Any]) -> None:
        """Write result.json, then mark the run finished."""
        self._events.close()
        _write_json(self.path / "result.json", result)
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
        names = []
        for file in sorted((self.path / "masks").glob("L*__*.npz")):
            layer, name = file.stem.split("__", 1)
            names.append((int(layer[1:]), name))
        return names

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
