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


@contextlib.contextmanager
def placed(module: nn.Module, device: torch.device, dtype: torch.dtype | None = None) -> Iterator[None]:
    """Hold ``module`` on ``device`` (floating tensors cast to ``dtype`` when given) inside; restore after.

    Every parameter and buffer goes back to its own device and dtype. Tensors created inside
    (a smaller Linear after heads were removed) go to the module's former device and storage dtype.
    """
    homes = {id(t): (t.device, t.dtype) for t in _tensors(module)}
    fallback = (next(iter(homes.values()))[0] if homes else torch.device("cpu"), storage_dtype(module))
    for tensor in _tensors(module):
        cast = dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype
        if tensor.device != device or tensor.dtype != cast:
            tensor.data = tensor.data.to(device, cast)
    try:
        yield
    finally:
        for tensor in _tensors(module):
            home, home_dtype = homes.get(id(tensor), (fallback[0], fallback[1] if tensor.is_floating_point()
                                                     else tensor.dtype))
            if tensor.device != home or tensor.dtype != home_dtype:
                tensor.data = tensor.data.to(home, home_dtype)
