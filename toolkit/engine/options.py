"""The engine's option values, importable without torch (the CLI parser and RunConfig check them)."""

from __future__ import annotations

PROPAGATE = ("pruned", "dense")  # layer i+1's inputs: the pruned or the dense outputs of layer i
SEQUENTIAL = ("group", "layer")  # statistics after the earlier groups were pruned, or all from the dense layer
FUSED = ("auto", "on", "off")  # sequential=group as one forward pass per layer over all windows
DEVICES_AUTO = "auto"  # parallel layer pruning on every GPU when there are several and inputs are dense
FORWARD_DTYPES = ("auto", "fp32", "bf16")  # decoder-layer passes (auto: bf16 on GPUs); statistics stay float32
STORAGE_DTYPES = ("auto", "float32", "bfloat16", "float16")  # the model on the host (auto: as the checkpoint)
CALIBRATE = ("auto", "always")  # a data-free method (magnitude, RTN) skips the calibration path, or runs it anyway
ERROR_MODES = ("sample", "none")  # the layer output error: on a sample of windows, or not measured (no pass for it)
