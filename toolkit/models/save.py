"""Save a pruned model as a safetensors checkpoint loadable with ``AutoModelForCausalLM``.

The weights are written in the dtype the model is held in (its checkpoint's own, e.g. bfloat16: a
pruned 7B is ~13.5 GB, not 27 GB), and config.json says so (``dtype``), so ``--dtype auto`` loads it back
in that dtype.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from torch import nn

from toolkit.models.tokenizers import BYTES_MARKER, ByteCodec, HFCodec, TextCodec
from toolkit.runtime.placement import storage_dtype

_MISSING = object()


@contextlib.contextmanager
def without_quantization(model: nn.Module) -> Iterator[None]:
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


def save_checkpoint(model: nn.Module, codec: TextCodec, folder: str | Path, *,
                    finish: Callable[[Path], None] | None = None) -> Path:
    """Write ``model`` (safetensors, no quantization_config) and its tokenizer to ``folder``; returns the folder.

    The folder is written under a ``.partial`` name and renamed at the end, so a failed save
    never leaves something that looks like a checkpoint; ``finish`` (when given) completes the
    partial folder before the rename (a quantization config, a structure file). On any failure
    (a full disk: ``OSError``) the partial folder is removed and the exception re-raised, so nothing
    of the attempt stays on disk.
    """
    folder = Path(folder)
    partial = folder.with_name(folder.name + ".partial")
    config: Any = getattr(model, "config", None)
    if config is not None:
        config.dtype = storage_dtype(model)  # config.json's dtype: what the weights are stored in
    try:
        with without_quantization(model):
            model.save_pretrained(partial)  # type: ignore[operator]  # transformers ≥ 5 always writes safetensors
        if isinstance(codec, HFCodec):
            codec.tokenizer.save_pretrained(partial)
        elif isinstance(codec, ByteCodec):
            (partial / BYTES_MARKER).write_text(json.dumps({"tokenizer": "bytes", "bos_id": codec.bos_id}))
        if finish is not None:
            finish(partial)
        partial.rename(folder)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return folder
