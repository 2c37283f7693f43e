"""A GGUF dequantized once into the PruneLab cache, then loaded from safetensors like any checkpoint.

transformers reads a GGUF by dequantizing every tensor in numpy (minutes for Gemma-3-270M on a busy
CPU). PruneLab does it once per file and keeps the result in :func:`toolkit.models.sources.cache_dir`:

- an embedded model under its name (``~/.cache/prunelab/gemma-3-270m``), its GGUF assembled from
  the installed chunks first (:func:`toolkit.models.embedded.assemble`, checksum checked);
- a user's ``.gguf`` under ``gguf/<stem>-<sha256[:16]>``, keyed by the file's content, so a changed
  file is converted again and a moved one is not.

The weights are written in the dtype the model is held in (``held``: bfloat16 for a GGUF source
unless ``--dtype`` says otherwise, float32 for the embedded SmolLM2 whose published figures were
measured so), with ``prunelab_lineage.json`` saying that the zeros are the source's rounding
(:mod:`toolkit.models.lineage`). The folder is written under ``.partial`` and renamed at the end: an
interrupted conversion leaves nothing that looks converted.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from toolkit.errors import ToolkitError
from toolkit.models.embedded import CHUNK_BYTES, EmbeddedModel, assemble
from toolkit.models.lineage import quantized_source, write_lineage
from toolkit.models.sources import cache_dir

log = logging.getLogger(__name__)

CONVERTED = "config.json"  # present only in a finished conversion (the folder is renamed into place)


def embedded_cache(model: EmbeddedModel) -> Path:
    """Where ``model`` lives once dequantized."""
    return cache_dir() / model.name


def gguf_type(path: Path) -> str:
    """The GGUF's file type as llama.cpp names it (``Q4_K_M``), from its metadata; ``"GGUF"`` when unnamed."""
    from gguf import GGUFReader, LlamaFileType

    field = GGUFReader(path).fields.get("general.file_type")
    if field is None:
        return "GGUF"
    try:
        return LlamaFileType(int(field.parts[field.data[0]][0])).name.removeprefix("MOSTLY_")
    except ValueError:
        return "GGUF"


def file_sha256(path: Path) -> str:
    """The sha256 of ``path``'s content (1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def converted_embedded(model: EmbeddedModel) -> Path:
    """The cached safetensors folder of ``model``, converted now if it is not there yet."""
    folder = embedded_cache(model)
    if (folder / CONVERTED).is_file():
        return folder
    gguf = assemble(model, cache_dir() / model.gguf)
    _convert(gguf, folder, getattr(torch, model.dtype), model.quantization)
    return folder


def converted_gguf(path: Path, dtype: torch.dtype) -> Path:
    """The cached safetensors folder of a user's ``.gguf`` in ``dtype``, converted now if it is not there yet."""
    key = file_sha256(path)[:16]
    folder = cache_dir() / "gguf" / f"{path.stem}-{key}-{str(dtype).removeprefix('torch.')}"
    if not (folder / CONVERTED).is_file():
        _convert(path, folder, dtype, gguf_type(path))
    return folder


def layer_types(path: Path) -> list[str] | None:
    """Gemma 3's attention kind per layer from ``gemma3.attention.sliding_window_pattern`` (True = sliding).

    llama.cpp reads the array; transformers' GGUF reader does not and assumes the 5 : 1 pattern, which a
    depth-pruned export no longer has. None when the file has no such array.
    """
    from gguf import GGUFReader

    field = GGUFReader(path).fields.get("gemma3.attention.sliding_window_pattern")
    if field is None:
        return None
    return ["sliding_attention" if bool(flag) else "full_attention" for flag in field.contents()]


def _convert(gguf: Path, folder: Path, dtype: torch.dtype, quantization: str) -> None:
    """Dequantize ``gguf`` (transformers' reader), cast to ``dtype`` and save it with its tokenizer and lineage."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # a conversion interrupted earlier
    start = time.perf_counter()
    log.warning("dequantizing %s once into %s (a few minutes; later runs load the result)", gguf.name, folder)
    try:
        config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
        kinds = layer_types(gguf)
        if kinds is not None and len(kinds) == config.num_hidden_layers:
            config.layer_types = kinds  # a depth-pruned Gemma 3 export: its own pattern, not the default 5 : 1
        model: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, config=config,
                                                          dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model.hf_quantizer = None  # dequantized: the GGUF quantization no longer describes the weights
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.to(dtype)
        model.config.dtype = dtype
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        write_lineage(partial, quantized_source(quantization))
        partial.rename(folder)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise ToolkitError(f"could not write the dequantized {gguf.name} into {folder.parent} ({exc.strerror or exc}); "
                           "free disk space or set PRUNELAB_CACHE to a writable folder") from None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    log.warning("dequantized %s in %.0f s", gguf.name, time.perf_counter() - start)
