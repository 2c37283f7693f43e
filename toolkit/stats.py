"""Statistics accumulators and the hooks that feed them (STYLE R2: statistics live in the engine).

For one group of linears that share an input (e.g. q, k, v) the engine keeps one
:class:`GroupStats`; every linear of the group receives the same :class:`LinearStats`:

- ``gram``        G* = Σ_t x*_t x*_tᵀ / N    inputs on the pruned path
- ``cross``       C  = Σ_t x*_t x_tᵀ / N     pruned-path input against the dense-layer input
- ``dense_gram``  G  = Σ_t x_t x_tᵀ / N      dense-layer inputs

All in float32 (``SOLVER_DTYPE``), means over the N tokens seen.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn

from toolkit.errors import NumericalError
from toolkit.methods.base import SOLVER_DTYPE, LinearStats


class StopForward(Exception):
    """Raised by a hook to end a forward pass early once the needed inputs were captured."""


class GroupStats:
    """Running sums of the Gram matrices of one group's input (see the module docstring)."""

    def __init__(self, width: int, device: torch.device, cross: bool) -> None:
        self.count = 0
        self.gram = torch.zeros(width, width, dtype=SOLVER_DTYPE, device=device)
        self.cross = torch.zeros_like(self.gram) if cross else None
        self.dense_gram = torch.zeros_like(self.gram) if cross else None

    def add(self, x_pruned: Tensor, x_dense: Tensor | None = None) -> None:
        """Accumulate one batch: ``x_*`` are (..., in) activations of the same tokens."""
        xp = _flat(x_pruned)
        self.gram.addmm_(xp.t(), xp)
        if self.cross is not None:
            assert x_dense is not None and self.dense_gram is not None
            xd = _flat(x_dense)
            self.cross.addmm_(xp.t(), xd)
            self.dense_gram.addmm_(xd.t(), xd)
        self.count += xp.shape[0]

    def finish(self, where: str) -> LinearStats:
        """Means over the tokens; raises :class:`NumericalError` on non-finite activations."""
        if self.count == 0:
            raise NumericalError(f"{where}: no calibration tokens reached this linear")
        scale = 1.0 / self.count
        stats = LinearStats(
            gram=self.gram * scale,
            count=self.count,
            cross=None if self.cross is None else self.cross * scale,
            dense_gram=None if self.dense_gram is None else self.dense_gram * scale,
        )
        if not torch.isfinite(stats.gram).all():
            raise NumericalError(
                f"{where}: non-finite (NaN/Inf) activations in the calibration statistics; "
                "check the model weights (try --device cpu or a float32 checkpoint)"
            )
        return stats


def _flat(x: Tensor) -> Tensor:
    return x.reshape(-1, x.shape[-1]).to(SOLVER_DTYPE)


@contextlib.contextmanager
def capture_inputs(
    modules: dict[str, nn.Module], sink: Callable[[str, Tensor], None], stop_after: set[str] | None = None
) -> Iterator[None]:
    """Call ``sink(name, input)`` whenever a module runs; raise :class:`StopForward` once every
    module in ``stop_after`` has run (early exit). Hooks are removed on exit."""
    seen: set[str] = set()

    def make_hook(name: str) -> Callable:
        def hook(module: nn.Module, args: tuple) -> None:
            sink(name, args[0].detach())
            seen.add(name)
            if stop_after is not None and stop_after <= seen:
                raise StopForward

        return hook

    handles = [module.register_forward_pre_hook(make_hook(name)) for name, module in modules.items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def discover_groups(layer: nn.Module, linears: dict[str, nn.Module], run_layer: Callable[[], object]) -> list[list[str]]:
    """Groups of linears fed the very same input tensor, in call order (one probe forward).

    Linears that never run in the probe are left out (the caller warns about them).
    """
    order: list[tuple[str, Tensor]] = []
    with capture_inputs(linears, lambda name, x: order.append((name, x))):
        run_layer()
    groups: list[list[str]] = []
    keys: list[Tensor] = []
    for name, x in order:
        if any(name in g for g in groups):
            continue
        for key, group in zip(keys, groups, strict=True):
            if key is x or (key.data_ptr() == x.data_ptr() and key.shape == x.shape):
                group.append(name)
                break
        else:
            keys.append(x)
            groups.append([name])
    return groups
