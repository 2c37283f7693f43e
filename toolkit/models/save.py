"""Save a pruned model as a safetensors checkpoint loadable with ``AutoModelForCausalLM``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torch import nn

from toolkit.models.tokenizers import BYTES_MARKER, ByteCodec, HFCodec, TextCodec

_MISSING = object()


@contextlib.contextmanager
def _without_quantization(model: nn.Module) -> Iterator[None]:
    """Hide ``config.quantization_config`` and ``hf_quantizer`` while saving, restored after.

    The toolkit holds float weights (a GGUF is dequantized on load), so a quantization config in
    the saved config.json would describe a format the checkpoint is not in.
    """
    pretrained: Any = model  # a transformers PreTrainedModel
    config: Any = getattr(pretrained, "config", None)
    saved_config = getattr(config, "quantization_config", _MISSING)
    saved_quantizer = getattr(pretrained, "hf_quantizer", _MISSING)
    if saved_config is not _MISSING:
        del config.quantization_config
    if saved_quantizer is not _MISSING:
        pretrained.hf_quantizer = None
    try:
        yield
    finally:
        if saved_config is not _MISSING:
            config.quantization_config = saved_config
        if saved_quantizer is not _MISSING:
            pretrained.hf_quantizer = saved_quantizer


def save_checkpoint(model: nn.Module, codec: TextCodec, folder: str | Path) -> Path:
    """Write ``model`` (safetensors, no quantization_config) and its tokenizer to ``folder``; returns the folder.

    The folder is written under a ``.partial`` name and renamed at the end, so a failed save
    never leaves something that looks like a checkpoint.
    """
    folder = Path(folder)
    partial = folder.with_name(folder.name + ".partial")
    with _without_quantization(model):
        model.save_pretrained(partial)  # type: ignore[operator]  # transformers ≥ 5 always writes safetensors  # transformers ≥ 5 always writes safetensors
    if isinstance(codec, HFCodec):
        codec.tokenizer.save_pretrained(partial)
    elif isinstance(codec, ByteCodec):
        (partial / BYTES_MARKER).write_text(json.dumps({"tokenizer": "bytes", "bos_id": codec.bos_id}))
    partial.rename(folder)
    return folder
