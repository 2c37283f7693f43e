"""Save a pruned model as a safetensors checkpoint loadable with ``AutoModelForCausalLM``."""

from __future__ import annotations

import json
from pathlib import Path

from torch import nn

from toolkit.models import BYTES_MARKER
from toolkit.tokenizers import ByteCodec, HFCodec, TextCodec


def save_checkpoint(model: nn.Module, codec: TextCodec, folder: str | Path) -> Path:
    """Write ``model`` (safetensors) and its tokenizer to ``folder``; returns the folder.

    The folder is written under a ``.partial`` name and renamed at the end, so a failed save
    never leaves something that looks like a checkpoint.
    """
    folder = Path(folder)
    partial = folder.with_name(folder.name + ".partial")
    model.save_pretrained(partial)  # transformers ≥ 5 always writes safetensors
    if isinstance(codec, HFCodec):
        codec.tokenizer.save_pretrained(partial)
    elif isinstance(codec, ByteCodec):
        (partial / BYTES_MARKER).write_text(json.dumps({"tokenizer": "bytes", "bos_id": codec.bos_id}))
    partial.rename(folder)
    return folder
