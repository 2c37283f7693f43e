"""Where models come from, checked before anything loads.

The embedded models (:mod:`toolkit.models.embedded`), the tiny test models, a ``.gguf`` file, a
checkpoint folder or a hub id.

:func:`check_model_source` raises one :class:`ToolkitError` that names the input and says what to do.
Nothing here imports torch or transformers, loads weights or touches the network (except
:func:`hub_reachable`, one TCP connect when asked), so the CLI, the app's form and
:class:`toolkit.run.config.RunConfig` run it at once.
"""

from __future__ import annotations

import json
import os
import re
import socket
import struct
from pathlib import Path

from toolkit.errors import ToolkitError
from toolkit.models.embedded import EMBEDDED_MODELS, check_installed, is_embedded
from toolkit.models.structure_file import MARKER, read_structure
from toolkit.store.reader import read_json

EMBEDDED = "smollm2-135m"  # the default model
TINY_FAMILIES = ("llama", "opt", "gpt2", "qwen2", "gemma3")


def cache_dir() -> Path:
    """Where converted checkpoints live: ``$PRUNELAB_CACHE`` or ``~/.cache/prunelab``."""
    return Path(os.environ.get("PRUNELAB_CACHE", Path.home() / ".cache" / "prunelab"))


def hub_reachable(timeout: float = 3.0) -> bool:
    """One quick TCP connect, so an offline machine fails at once instead of retrying for minutes."""
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    host = os.environ.get("HF_ENDPOINT", "https://huggingface.co").split("://")[-1].split("/")[0]
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError:
        return False
    return True




def is_shrunk(folder: str | Path) -> bool:
    """True when ``folder`` holds a per-layer shrunk checkpoint (needs :func:`load_shrunk`)."""
    return (Path(folder) / MARKER).is_file()


RUN_STATUS = "status.json"  # written by the run store in every run folder, beside the run's config.json


def run_model_folder(path: str | Path) -> Path | None:
    """The model a PruneLab run folder saved (``<run>/model``); None when ``path`` is not a run folder.

    A run folder (``prune --out runs``) holds the run's config.json (a ``method``, no ``model_type``)
    and status.json. Raises a one-line :class:`ToolkitError` when it is one but holds no saved model.
    """
    path = Path(path)
    if not (path / RUN_STATUS).is_file():
        return None
    config, _ = read_json(path / "config.json", folder=path)  # bounded: a pipe or a 200,000-deep file is no run
    if not isinstance(config, dict) or "model_type" in config or "method" not in config:
        return None
    if (path / "model").is_dir():
        return path / "model"
    if config.get("save_model"):
        why = "the run saved no model (it did not get that far: see its status.json)"
    else:
        why = "the run saved no model (it ran without --save-model)"
    raise ToolkitError(f"{str(path)!r} is a PruneLab run folder and {why}; rerun it with --save-model to get "
                       f"one in {str(path / 'model')!r}, or give a checkpoint folder")


GGUF_MAGIC = b"GGUF"
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")  # "gpt2", "facebook/opt-125m"
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json",
                   "prunelab_byte_tokenizer.json")
CONVERT = ("convert it where you trust the file: `python -c \"from transformers import AutoModelForCausalLM as M; "
           "M.from_pretrained('DIR').save_pretrained('DIR-safetensors')\"`")


def check_model_source(name: str) -> None:
    """Raise unless ``name`` can name a model: built-in, a readable .gguf, a checkpoint folder or a hub id."""
    name = (name or "").strip()
    if not name:
        raise ToolkitError(f"no model given: use {EMBEDDED!r}, a local directory, a .gguf file or a hub id")
    if is_embedded(name):
        check_installed(name)  # its packages and chunk files, before any work
        return
    if name in {f"tiny-{f}" for f in TINY_FAMILIES}:
        return
    path = Path(name).expanduser()
    if name.endswith(".gguf"):
        _check_gguf(path)
    elif path.is_dir():
        _check_checkpoint_folder(run_model_folder(path) or path)
    elif path.exists():
        raise ToolkitError(f"model {name!r} is a file but not a .gguf; give a checkpoint folder or a .gguf file")
    elif name.startswith("tiny-"):
        raise ToolkitError(f"unknown tiny model {name!r}: use one of {', '.join('tiny-' + f for f in TINY_FAMILIES)}")
    elif name.startswith((".", "/", "~")) or not HUB_ID.fullmatch(name) or name.count("/") > 1:
        known = " or ".join(map(repr, EMBEDDED_MODELS))
        raise ToolkitError(f"model {name!r} does not exist: give {known}, tiny-llama, a checkpoint folder, a .gguf "
                           "file or a Hugging Face hub id")


def _check_gguf(path: Path) -> None:
    if not path.is_file():
        raise ToolkitError(f"GGUF file {str(path)!r} does not exist")
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError as exc:
        raise ToolkitError(f"cannot read {str(path)!r} ({exc.strerror}); check its permissions") from None
    if head != GGUF_MAGIC:
        raise ToolkitError(f"{str(path)!r} is not a GGUF file (it does not start with the GGUF magic bytes); "
                           "download it again, or join split parts into one file first (cat part1 part2 > model.gguf)")


def _check_checkpoint_folder(path: Path) -> None:

    where = str(path)
    try:
        files = {p.name for p in path.iterdir()}
    except OSError as exc:
        raise ToolkitError(f"cannot read model folder {where!r} ({exc.strerror}); check its permissions") from None
    if not files:
        raise ToolkitError(f"model folder {where!r} is empty; give a folder with config.json, *.safetensors and "
                           "the tokenizer files (as save_pretrained writes them)")
    if "config.json" not in files:
        raise ToolkitError(f"model folder {where!r} has no config.json; it is not a Hugging Face checkpoint")
    # bounded and non-blocking; a checkpoint's files may be links anywhere (the hub cache links them to blobs)
    config, why = read_json(path / "config.json", folder=Path(path.resolve().anchor))
    if config is None:
        raise ToolkitError(f"{where}/config.json is not readable JSON ({why}); restore it from the original")
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise ToolkitError(f"{where}/config.json has no model_type; restore it from the original checkpoint")
    if not is_shrunk(path) and not any(path.glob("*.safetensors")):
        pickled = sorted(f.name for pattern in PICKLE_WEIGHTS for f in path.glob(pattern))
        if pickled:
            raise ToolkitError(f"model folder {where!r} holds only pickle weights ({', '.join(pickled)}); only "
                               f"safetensors are loaded (a pickle can run code): {CONVERT}")
        raise ToolkitError(f"model folder {where!r} has no *.safetensors weights; save the model with "
                           "save_pretrained (safetensors is the default)")
    if not files & set(TOKENIZER_FILES):
        raise ToolkitError(f"model folder {where!r} has no tokenizer (tokenizer.json, tokenizer.model or vocab.json); "
                           "copy the tokenizer files from the original model, or save them with "
                           "tokenizer.save_pretrained(folder)")
    if is_shrunk(path):
        read_structure(path)  # its per-layer shapes checked field by field, before any weight loads
    else:
        check_shards(path)  # every shard there, every decoder layer with tensors: named before any weight loads


SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
_LAYER_KEY = re.compile(r"^((?:[^.]+\.)*?)(\d+)\.")  # the first numeric component: "model.layers." + "3" + "."
_HEADER_LIMIT = 100 * 2**20  # a safetensors JSON header is kilobytes to a few megabytes


def check_shards(folder: str | Path) -> dict[str, str]:
    """Check that a safetensors checkpoint folder holds every shard and every decoder layer; return its weight map.

    Reads ``model.safetensors.index.json`` (every listed shard must exist and its header must hold
    the tensors the index assigns to it) or the single ``model.safetensors`` header (8-byte
    little-endian length, then JSON), torch-free and without reading any weights. When config.json
    gives the number of decoder layers (``num_hidden_layers``, ``n_layer`` or ``num_layers``), every
    layer index below it must have at least one tensor under the layer-key prefix (``model.layers.``).

    Returns tensor name → shard file name (relative to ``folder``). Raises one-line
    :class:`ToolkitError` naming the missing shard, tensor or first decoder layer without tensors.
    """
    folder = Path(folder)
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        weight_map = _index_weight_map(index)
        headers: dict[str, set[str]] = {}
        for shard in sorted(set(weight_map.values())):
            if not (folder / shard).is_file():
                raise ToolkitError(f"shard {shard} listed in {index} does not exist; the checkpoint is incomplete: "
                                   f"download {shard} again")
            headers[shard] = _tensor_names(folder / shard)
        for name, shard in weight_map.items():
            if name not in headers[shard]:
                raise ToolkitError(f"{index} puts tensor {name} in {shard}, but that shard does not hold it; the shard "
                                   "is incomplete or from another download: download it again")
    elif (folder / SAFETENSORS_SINGLE).is_file():
        weight_map = dict.fromkeys(_tensor_names(folder / SAFETENSORS_SINGLE), SAFETENSORS_SINGLE)
    else:
        raise ToolkitError(f"model folder {str(folder)!r} has neither {SAFETENSORS_SINGLE} nor {SAFETENSORS_INDEX}; "
                           "save the model with save_pretrained (safetensors is the default)")
    _check_layers(weight_map, _num_layers(folder / "config.json"), folder)
    return weight_map


def _index_weight_map(index: Path) -> dict[str, str]:
    """The ``weight_map`` of a safetensors index file (tensor name → shard file)."""
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ToolkitError(f"{index} is not readable JSON ({exc}); download it again") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ToolkitError(f"{index} has no weight_map of tensor names to shard files; download it again")
    return {str(name): shard for name, shard in weight_map.items()}


def _tensor_names(path: Path) -> set[str]:
    """The tensor names in a safetensors file's header (no weights are read)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            length = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            if not 0 < length <= min(_HEADER_LIMIT, path.stat().st_size - 8):
                raise ValueError("bad header length")
            header = json.loads(handle.read(length))
    except OSError as exc:
        raise ToolkitError(f"cannot read {str(path)!r} ({exc.strerror}); check its permissions") from None
    except ValueError:
        raise ToolkitError(f"{str(path)!r} is not a safetensors file (its header is unreadable); the file is "
                           "truncated or corrupt: download it again") from None
    if not isinstance(header, dict):
        raise ToolkitError(f"{str(path)!r} is not a safetensors file (its header is not a JSON object)")
    return {name for name in header if name != "__metadata__"}


def _num_layers(config: Path) -> int | None:
    """The number of decoder layers config.json gives at its top level (None when it gives none)."""
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        if isinstance(data.get(key), int) and not isinstance(data.get(key), bool):
            return int(data[key])
    return None


def _check_layers(weight_map: dict[str, str], num_layers: int | None, folder: Path) -> None:
    """Raise naming the first decoder layer below ``num_layers`` that has no tensor in ``weight_map``.

    The layer-key prefix is the one (before the first numeric key component) holding the most distinct
    indices, all below ``num_layers``; nothing is checked when no prefix qualifies (unusual key names).
    """
    if not num_layers:
        return
    indices: dict[str, set[int]] = {}
    for name in weight_map:
        match = _LAYER_KEY.match(name)
        if match:
            indices.setdefault(match.group(1), set()).add(int(match.group(2)))
    fitting = {prefix: found for prefix, found in indices.items() if max(found) < num_layers}
    if not fitting:
        return
    prefix = max(fitting, key=lambda p: (len(fitting[p]), "layers" in p))
    for layer in range(num_layers):
        if layer not in fitting[prefix]:
            raise ToolkitError(f"decoder layer {layer} has no tensors ({prefix}{layer}.*) in the safetensors of "
                               f"{str(folder)!r}, which config.json says has {num_layers} layers; the checkpoint is "
                               "incomplete: download its shards again")
