"""Where and in which dtype a module is held while the engine works on it.

A model is stored in its own dtype (bfloat16 for most checkpoints) on the host; the engine moves
one decoder layer at a time to the compute device, in the dtype its forward passes run in
(:func:`toolkit.runtime.precision.layer_precision`), and back. :func:`placed` records every
tensor's device and dtype and restores both, so a float32 buffer of a bfloat16 layer stays
float32 and nothing is upcast in storage.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn


def _tensors(module: nn.Module) -> list[Tensor]:
    return list(module.parameters()) + list(module.buffers())


def storage_dtype(module: nn.Module) -> torch.dtype:
    """The dtype most of ``module``'s floating parameters are stored in (float32 when it has none)."""
    counts: dict[torch.dtype, int] = {}
    for tensor in module.parameters():
        if tensor.is_floating_point():
            counts[tensor.dtype] = counts.get(tensor.dtype, 0) + tensor.numel()
    return max(counts, key=lambda d: counts[d]) if counts else torch.float32


def move_(tensors: list[Tensor], device: torch.device, dtype: torch.dtype | None = None
          ) -> list[tuple[Tensor, torch.device, torch.dtype]]:
    """Move ``tensors`` in place to ``device`` (floating ones cast to ``dtype`` when given).

    Returns (tensor, former device, former dtype) for each one moved, what :func:`restore_` takes.
    """
    moved = []
    for tensor in tensors:
        cast = dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype
        if tensor.device != device or tensor.dtype != cast:
            moved.append((tensor, tensor.device, tensor.dtype))
            tensor.data = tensor.data.to(device, cast)
    return moved


def restore_(moved: list[tuple[Tensor, torch.device, torch.dtype]]) -> None:
    """Put every tensor :func:`move_` moved back on its former device, in its former dtype."""
    for tensor, home, home_dtype in moved:
        tensor.data = tensor.data.to(home, home_dtype)


@contextlib.contextmanager
def placed(module: nn.Module, device: torch.device, dtype: torch.dtype | None = None) -> Iterator[None]:
    """Hold ``module`` on ``device`` (floating tensors cast to ``dtype`` when given) inside; restore after.

    Every parameter and buffer goes back to its own device and dtype. Tensors created inside
    (a smaller Linear after heads were removed) go to the module's former device and storage dtype.
    """
    before = {id(t) for t in _tensors(module)}
    home = next((t.device for t in _tensors(module)), torch.device("cpu"))
    storage = storage_dtype(module)
    moved = move_(_tensors(module), device, dtype)
    try:
        yield
    finally:
        restore_(moved)
        created = [t for t in _tensors(module) if id(t) not in before]
        move_(created, home, storage)
