"""Precision of the engine: the model's own storage dtype, bf16 or float32 layer passes, float32 statistics and solves.

Three dtypes meet in a run (docs/scale.md):

- **storage**: the dtype the model is held in on the host and saved in — the checkpoint's own
  (bfloat16 for most), float32 for the embedded GGUF and the tiny models (``--dtype``);
- **forward**: the dtype of the decoder-layer passes (``--forward-dtype``): ``auto`` is bf16 on a
  GPU with bf16 support and float32 elsewhere. :func:`layer_precision` says in which dtype the
  layer is held on the device and whether autocast runs: a bfloat16 layer with bf16 passes runs
  natively; any other combination holds the layer in float32 (one layer at a time is upcast, an
  exact copy) and bf16 passes run under ``torch.autocast``;
- **statistics and solves**: always float32 (``SOLVER_DTYPE``), autocast switched off
  (:func:`full_precision`), on the activations cast to float32. Results are written back in the
  layer's dtype on the device and cast to the storage dtype when the layer goes home.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}  # None: no autocast
STORAGE_DTYPES: dict[str, torch.dtype | None] = {"auto": None, "float32": torch.float32,
                                                 "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


@dataclass(frozen=True)
class LayerPrecision:
    """How a decoder layer runs on the device: held in ``layer_dtype``, passes under autocast to ``autocast``."""

    layer_dtype: torch.dtype
    autocast: torch.dtype | None

    @property
    def forward(self) -> str:
        """The precision of the matmuls of the passes: ``bf16`` or ``fp32``."""
        return "bf16" if torch.bfloat16 in (self.layer_dtype, self.autocast) else "fp32"


def layer_precision(storage: torch.dtype, forward: torch.dtype | None) -> LayerPrecision:
    """The dtype a layer stored in ``storage`` is held in on the device, and the autocast of its passes.

    ``forward`` is the resolved forward dtype (None: float32 passes). bf16 storage with bf16 passes
    runs natively (no copy, no autocast); otherwise the layer is held in float32 — a bf16/fp16
    layer is upcast exactly — and bf16 passes run under autocast.
    """
    if forward is torch.bfloat16 and storage is torch.bfloat16:
        return LayerPrecision(torch.bfloat16, None)
    return LayerPrecision(torch.float32, forward)


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
