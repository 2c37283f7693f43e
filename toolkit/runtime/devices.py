"""The device a run computes on and the dtype of its forward passes, checked before any work."""

from __future__ import annotations

from collections.abc import Callable

import torch

from toolkit.errors import ToolkitError
from toolkit.events import Event, RunWarning
from toolkit.runtime.precision import AUTOCAST_DTYPES, bf16_supported


def resolve_device(name: str) -> torch.device:
    """``auto`` → cuda when available, else cpu; otherwise the named device (checked)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ToolkitError(f"{name!r} was asked for but no CUDA device is available here; use --device cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ToolkitError(f"unknown device {name!r}; use auto, cpu or cuda") from None
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ToolkitError(f"device {name!r} does not exist: this machine has {count} CUDA device"
                           f"{'s' if count != 1 else ''} (cuda:0 to cuda:{count - 1})")
    if device.type != "cpu":
        try:  # torch.device("mps") parses on any build; only an allocation tells whether it is usable
            torch.empty(1, device=device)
        except (RuntimeError, AssertionError) as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0].split(". ")[0][:160]
            raise ToolkitError(f"device {name!r} is not usable here ({first}); use --device auto or cpu") from None
    return device


def forward_dtype(name: str, device: torch.device, emit: Callable[[Event], None]) -> torch.dtype | None:
    """The dtype of the layer passes (None: float32).

    ``auto`` is bf16 on a GPU with bf16 support, float32 otherwise (CPUs: float32 unless asked);
    ``bf16`` on a device without bf16 support runs in float32 with a warning.
    """
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" and bf16_supported(device) else None
    dtype = AUTOCAST_DTYPES[name]
    if dtype is torch.bfloat16 and not bf16_supported(device):
        emit(RunWarning(message=f"--forward-dtype bf16: {device.type} has no native bf16 (AVX512-BF16/AMX on CPUs, "
                                "Ampere or later GPUs); the forward passes run in float32", layer=-1))
        return None
    return dtype
