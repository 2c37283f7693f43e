"""A run's calibration windows and their protocol entry; a data-free run reads no text (engine/data_free.py)."""

from __future__ import annotations

from typing import Any

import torch

from toolkit.data.text import CalibSpec, calibration_windows, load_tokens
from toolkit.run.config import RunConfig


def calibration_of(config: RunConfig, codec: Any, bos: int | None) -> tuple[torch.Tensor, dict[str, Any]]:
    """(windows (nsamples, seqlen), the protocol's ``calibration`` entry).

    A data-free run (``config.uses_calibration()`` False) gets no window, (0, seqlen), and an entry with
    ``used: False``; a calibrated run's entry is as it always was (no ``used`` key).
    """
    calib = CalibSpec(config.calib, config.nsamples, config.seqlen, config.seed)
    used = config.uses_calibration()
    windows = calibration_windows(load_tokens(config.calib, "train", codec, config.encoding), calib, bos) if used \
        else torch.empty(0, config.seqlen, dtype=torch.long)
    entry = {"source": calib.source, "split": "train", "nsamples": calib.num_samples, "seqlen": calib.seq_len,
             "seed": calib.seed, "tokens": int(windows.numel())}
    return windows, entry if used else entry | {"used": False}
