"""Write results into the model, with a journal that undoes every change (CONTRIBUTING.md R3, R5).

Three kinds of change, each backed up before it is made:

- ``weight(module, W)``: a new (out, in) weight of the same shape becomes the parameter's data (masks and
  quantized weights); the old values are kept on the CPU in the model's storage dtype — in memory
  up to ``budget_bytes``, beyond it into a temporary safetensors file each (so the journal of a 7B
  model does not double the host memory; :meth:`WriteBack.discard` deletes the files);
- ``replace(parent, attr, new)``: a submodule swapped for another one (a smaller Linear after heads
  or channels were removed); the old module object is kept;
- ``set_attr(obj, attr, value)``: any attribute (a layer's head count, a config's sizes).

:meth:`WriteBack.restore` undoes them in reverse order, so a failed or cancelled run leaves the
model exactly as it was, shapes included. Journals of parallel workers are merged with
:meth:`WriteBack.absorb`.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from toolkit.models.layers import get_weight, set_weight_

_MISSING = object()


def replace_weight_(module: nn.Module, weight: Tensor) -> None:
    """Make ``weight`` (out, in) the data of ``module.weight`` in its storage layout, dtype and device.

    The parameter object stays (hooks, placement records and optimizers still see it); its former
    data is released, not overwritten. ``weight`` itself becomes the data when it already has the
    parameter's dtype, device and a contiguous layout.
    """
    stored = module.weight
    assert isinstance(stored, Tensor), f"{type(module).__name__} has no weight tensor"
    data = weight.t() if type(module).__name__ == "Conv1D" else weight
    assert data.shape == stored.shape, f"weight of shape {tuple(data.shape)} for {tuple(stored.shape)}"
    stored.data = data.to(stored.device, stored.dtype).contiguous()


@dataclass
class WriteBack:
    """A journal of changes to one model; ``enabled=False`` writes without keeping backups."""

    enabled: bool = True
    budget_bytes: int | None = None  # backups held in memory; None: all of them
    _undo: list[Callable[[], None]] = field(default_factory=list)
    _held: int = 0
    _dirs: list[Path] = field(default_factory=list)
    _count: itertools.count = field(default_factory=itertools.count)

    def weight(self, module: nn.Module, weight: Tensor, backup_dtype: torch.dtype | None = None) -> None:
        """Make ``weight`` (out, in) the weight of ``module`` (Linear or Conv1D), in the module's dtype and device.

        The parameter keeps its identity; its data is replaced rather than overwritten, so the former data
        stays valid for whoever holds it (the solve's "before" weight needs no copy) and serves as the
        backup itself when it is already on the CPU in ``backup_dtype``. The backup is kept in
        ``backup_dtype`` (the model's storage dtype when the layer was upcast on the device, an exact round
        trip), else in the module's dtype.
        """
        if self.enabled:
            old = self._keep(get_weight(module).detach(), backup_dtype)
            self._undo.append(lambda: set_weight_(module, old()))
        replace_weight_(module, weight)

    def _keep(self, current: Tensor, dtype: torch.dtype | None) -> Callable[[], Tensor]:
        """A backup of ``current`` in ``dtype`` on the CPU, in memory while the budget allows, else in a file.

        ``current`` is the data being replaced (never written again), so it is kept as it is when nothing
        needs converting; otherwise one converted copy is made (and, beyond the budget, written and dropped).
        """
        tensor = current.to("cpu", dtype)
        nbytes = tensor.numel() * tensor.element_size()
        if self.budget_bytes is None or self._held + nbytes <= self.budget_bytes:
            self._held += nbytes
            return lambda: tensor
        if not self._dirs:
            self._dirs.append(Path(tempfile.mkdtemp(prefix="prunelab-journal-")))
        path = self._dirs[0] / f"{next(self._count)}.safetensors"
        save_file({"w": tensor.contiguous()}, str(path))
        return lambda: load_file(str(path))["w"]

    def replace(self, parent: nn.Module, attr: str, new: nn.Module) -> None:
        """Swap ``parent.<attr>`` for ``new`` (e.g. a smaller Linear); the old module is kept for undo."""
        old = getattr(parent, attr)
        if self.enabled:
            self._undo.append(lambda: setattr(parent, attr, old))
        setattr(parent, attr, new)

    def set_attr(self, obj: Any, attr: str, value: Any) -> None:
        """Set ``obj.<attr> = value`` (head counts, sizes); the old value (or its absence) is kept."""
        old = getattr(obj, attr, _MISSING)
        if self.enabled:
            self._undo.append(lambda: setattr(obj, attr, old) if old is not _MISSING else delattr(obj, attr))
        setattr(obj, attr, value)

    def absorb(self, other: WriteBack) -> None:
        """Take over ``other``'s journal (its changes are undone after this one's later changes)."""
        self._undo.extend(other._undo)
        self._dirs.extend(other._dirs)
        other._undo.clear()
        other._dirs.clear()

    def restore(self) -> None:
        """Undo every change, newest first; the journal is empty afterwards."""
        while self._undo:
            self._undo.pop()()
        self.discard()

    def discard(self) -> None:
        """Forget every backup (the changes stay) and delete the journal's files."""
        self._undo.clear()
        self._held = 0
        for folder in self._dirs:
            shutil.rmtree(folder, ignore_errors=True)
        self._dirs.clear()

    def __len__(self) -> int:
        return len(self._undo)
