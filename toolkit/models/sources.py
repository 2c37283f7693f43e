"""Where models come from, checked before anything loads.

The embedded model, the tiny test models, a ``.gguf`` file, a checkpoint folder or a hub id.

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
from pathlib import Path

from toolkit.errors import ToolkitError

EMBEDDED = "smollm2-135m"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
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


MARKER = "prunelab_structure.json"


def is_shrunk(folder: str | Path) -> bool:
    """True when ``folder`` holds a per-layer shrunk checkpoint (needs :func:`load_shrunk`)."""
    return (Path(folder) / MARKER).is_file()


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
    if name == EMBEDDED or name in {f"tiny-{f}" for f in TINY_FAMILIES}:
        return
    path = Path(name).expanduser()
    if name.endswith(".gguf"):
        _check_gguf(path)
    elif path.is_dir():
        _check_checkpoint_folder(path)
    elif path.exists():
        raise ToolkitError(f"model {name!r} is a file but not a .gguf; give a checkpoint folder or a .gguf file")
    elif name.startswith("tiny-"):
        raise ToolkitError(f"unknown tiny model {name!r}: use one of {', '.join('tiny-' + f for f in TINY_FAMILIES)}")
    elif name.startswith((".", "/", "~")) or not HUB_ID.fullmatch(name) or name.count("/") > 1:
        raise ToolkitError(f"model {name!r} does not exist: give {EMBEDDED!r}, tiny-llama, a checkpoint folder, "
                           "a .gguf file or a Hugging Face hub id")


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
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ToolkitError(f"{where}/config.json is not readable JSON ({exc}); restore it from the original") from None
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
