"""Forward-pass precision of the engine: bf16 layer passes with float32 statistics and solves.

``forward_dtype="bf16"`` runs every decoder-layer forward pass of the engine under
``torch.autocast(device, torch.bfloat16)``: the linears and attention compute in bfloat16 (AMX /
AVX512-BF16 on CPUs, tensor cores on GPUs) while the weights stay in the model's dtype, so what
a solver reads and what the engine writes back keep that dtype. Statistics (G = XᵀX/N and the
cross terms) and the solves run with autocast switched off (:func:`full_precision`), in float32
(``SOLVER_DTYPE``), on the bf16 activations cast to float32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}  # None: no autocast


def bf16_supported(device: torch.device) -> bool:
    """Whether ``device`` runs bfloat16 matmuls natively (CUDA: Ampere or later; CPU: AVX512-BF16 or AMX)."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type == "cpu":
        checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
        return any(bool(check()) for check in checks if check is not None)
    return False


@contextlib.contextmanager
def forward_precision(device: torch.device, dtype: torch.dtype | None) -> Iterator[None]:
    """Run the forward passes inside under autocast to ``dtype`` on ``device`` (None: unchanged)."""
    if dtype is None:
        yield
        return
    # no cast cache: the engine writes pruned weights between passes of one autocast region, and a cached
    # bf16 copy of the dense weight would hide them (https://pytorch.org/docs/stable/amp.html#torch.autocast)
    with torch.autocast(device_type=device.type, dtype=dtype, cache_enabled=False):
        yield


@contextlib.contextmanager
def full_precision(device: torch.device) -> Iterator[None]:
    """Switch autocast off (statistics and solves compute in float32 even inside a bf16 forward)."""
    with torch.autocast(device_type=device.type, enabled=False):
        yield
