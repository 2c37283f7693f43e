"""Which device(s) ran a run and the GPU memory peak, for the CLI summary, the app and result.json."""

from __future__ import annotations

import torch

from toolkit.engine.parallel import resolve_devices
from toolkit.engine.state import EngineConfig
from toolkit.runtime.devices import resolve_device


def devices_label(device: torch.device, engine_cfg: EngineConfig, propagate: str) -> str:
    """``cpu``, ``cuda:0``, ``cuda:0, cuda:1`` (threads over devices) or ``2 ranks × cpu (gloo)``."""
    if engine_cfg.distributed:
        import torch.distributed as dist  # only a distributed run has a process group

        return f"{dist.get_world_size()} ranks × {device.type} ({dist.get_backend()})"
    return ", ".join(str(d) for d in used_devices(device, engine_cfg, propagate))


def used_devices(device: torch.device, engine_cfg: EngineConfig, propagate: str) -> list[torch.device]:
    """The devices this process prunes on (several with ``--devices``); CUDA ones with their index."""
    found = resolve_devices(engine_cfg.devices, device, propagate, resolve_device)
    return [torch.device("cuda", torch.cuda.current_device()) if d.type == "cuda" and d.index is None else d
            for d in found]


def reset_gpu_peak(devices: list[torch.device]) -> None:
    """Start the GPU memory peak afresh on every CUDA device of ``devices``."""
    for device in devices:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)


def gpu_peak_mb(devices: list[torch.device], remote_mb: float | None = None) -> float | None:
    """The GPU memory peak in MiB, or None when no GPU ran (reported as n/a).

    The highest ``torch.cuda.max_memory_allocated`` over the CUDA ``devices`` and ``remote_mb``, the other ranks'.
    """
    peaks = [torch.cuda.max_memory_allocated(d) / 2**20 for d in devices if d.type == "cuda"]
    if remote_mb is not None:
        peaks.append(remote_mb)
    return max(peaks) if peaks else None
