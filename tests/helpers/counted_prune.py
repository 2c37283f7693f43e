"""Prune a tiny model on synthetic calibration while counting the decoder layers' forward passes (engine tests)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from toolkit.data.text import CalibSpec, calibration_windows
from toolkit.engine.prune import prune_layers
from toolkit.engine.state import EngineConfig
from toolkit.methods import get_method
from toolkit.models.layers import decoder_layers
from toolkit.spec.compression import Compression
from toolkit.spec.targets import Target


def synthetic_windows(num: int = 6, seq: int = 32) -> torch.Tensor:
    """``num`` calibration windows of ``seq`` random token ids (seeded: the same every call)."""
    tokens = torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(3))
    return calibration_windows(tokens, CalibSpec("x", num, seq, 0))


def prune_counting(model: nn.Module, method: str, compression: Compression | Target, **engine: Any
                   ) -> tuple[list, int]:
    """Prune ``model`` in place; returns (events, completed forwards of the decoder layers)."""
    spec = get_method(method)
    events: list = []
    completed = [0]
    handles = [layer.register_forward_hook(lambda *_: completed.__setitem__(0, completed[0] + 1))
               for layer in decoder_layers(model)]
    try:
        prune_layers(model, synthetic_windows(), spec, compression, spec.make_config(), emit=events.append,
                     cfg=EngineConfig(batch_size=2, device="cpu", error_windows=2, **engine))
    finally:
        for handle in handles:
            handle.remove()
    return events, completed[0]
