"""Write results into the model, with a journal that undoes every change (CONTRIBUTING.md R3, R5).

Three kinds of change, each backed up before it is made:

- ``weight(module, W)``: a new (out, in) weight of the same shape, written in place (masks and
  quantized weights); the old values are copied to the CPU;
- ``replace(parent, attr, new)``: a submodule swapped for another one (a smaller Linear after heads
  or channels were removed); the old module object is kept;
- ``set_attr(obj, attr, value)``: any attribute (a layer's head count, a config's sizes).

:meth:`WriteBack.restore` undoes them in reverse order, so a failed or cancelled run leaves the
model exactly as it was, shapes included. Journals of parallel workers are merged with
:meth:`WriteBack.absorb`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn

from toolkit.models.layers import get_weight, set_weight_

_MISSING = object()


@dataclass
class WriteBack:
    """A journal of changes to one model; ``enabled=False`` writes without keeping backups."""

    enabled: bool = True
    _undo: list[Callable[[], None]] = field(default_factory=list)

    def weight(self, module: nn.Module, weight: Tensor) -> None:
        """Write ``weight`` (out, in) into ``module`` (Linear or Conv1D) in its dtype, in place."""
        if self.enabled:
            old = get_weight(module).detach().to("cpu", copy=True)
            self._undo.append(lambda: set_weight_(module, old))
        set_weight_(module, weight)

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
        other._undo.clear()

    def restore(self) -> None:
        """Undo every change, newest first; the journal is empty afterwards."""
        while self._undo:
            self._undo.pop()()

    def __len__(self) -> int:
        return len(self._undo)
