"""Writing one run into the store as it happens (schema :data:`SCHEMA`; the layout is in :mod:`toolkit.store.runs`).

Every JSON file is written atomically (a temporary file, then a rename), so a reader never sees half
of one; a failed or cancelled run removes what would claim success.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from toolkit.events import Event

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


def mask_file(layer: int, name: str) -> str:
    """``L<layer>__<linear>.npz``: the file name of one linear's keep-mask or quantization state."""
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
        np.savez(self.path / "masks" / mask_file(layer, name), bits=np.packbits(keep.ravel()),
                 shape=np.array(keep.shape))
        self.masks_written += 1

    def quant(self, layer: int, name: str, state: StoredQuant) -> None:
        """Store a linear's quantization state (codes, scales, zeros and the grid) beside its mask."""
        folder = self.path / "quant"
        folder.mkdir(exist_ok=True)
        np.savez(folder / mask_file(layer, name), codes=np.asarray(state.codes, dtype=np.uint8),
                 scales=np.asarray(state.scales, dtype=np.float32), zeros=np.asarray(state.zeros, dtype=np.float32),
                 bits=np.array(state.bits), group_size=np.array(state.group_size), symmetric=np.array(state.symmetric))

    def structure(self, change: dict[str, Any]) -> None:
        """Append one structure change (plain data: layer, units kept, new shapes) to structure.json."""
        self._structure.append(change)
        _write_json(self.path / "structure.json", {"schema": SCHEMA, "changes": self._structure})

    def write_result(self, result: dict[str, Any]) -> None:
        """Write result.json (what the compression did; the status still says whether the run finished)."""
        _write_json(self.path / "result.json", {**result, "masks": self.masks_written, "schema": SCHEMA},
                    allow_nan=False)  # NaN/Infinity are not JSON: a result holds None where nothing was measured

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

def _write_json(path: Path, data: Any, allow_nan: bool = True) -> None:
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, default=str, allow_nan=allow_nan), encoding="utf-8")
        tmp.replace(path)  # atomic: a reader never sees half a file
    except OSError:
        tmp.unlink(missing_ok=True)  # no half-written leftover (e.g. disk full)
        raise
