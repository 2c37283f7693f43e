"""Checks of a run's inputs made before any model loads or any file is written (STYLE R9, R13).

Each check raises one :class:`ToolkitError` that names the input and says what to do; none of
them imports torch or transformers, loads weights or touches the network, so the CLI, the app's
form and :class:`toolkit.api.RunConfig` run them at once:

- :func:`check_model_source`: a name, a ``.gguf`` file, a checkpoint folder or a hub id;
- :func:`check_text_source`: a dataset name or a text file in the given encoding;
- :func:`check_window`: a sequence length and a window count (``prune`` and ``eval`` alike);
- :func:`check_writable_dir` / :func:`check_writable_file`: ``--out`` and ``--json``.

The model's own limits (positions) are checked once it is loaded (:mod:`toolkit.checks`).
"""

from __future__ import annotations

import codecs
import json
import re
import tempfile
from pathlib import Path

from toolkit.errors import ToolkitError

GGUF_MAGIC = b"GGUF"
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")  # "gpt2", "facebook/opt-125m"
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json",
                   "prunelab_byte_tokenizer.json")
CONVERT = ("convert it where you trust the file: `python -c \"from transformers import AutoModelForCausalLM as M; "
           "M.from_pretrained('DIR').save_pretrained('DIR-safetensors')\"`")


def check_model_source(name: str) -> None:
    """Raise unless ``name`` can name a model: built-in, a readable .gguf, a checkpoint folder or a hub id."""
    from toolkit.models import EMBEDDED, TINY_FAMILIES

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
    from toolkit.shrunk import is_shrunk

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


def check_text_source(source: str, encoding: str = "utf-8") -> None:
    """Raise unless ``source`` is a known dataset or a readable text file in ``encoding``."""
    from toolkit.data import SOURCES
    from toolkit.data_disk import is_saved_dataset

    try:
        codecs.lookup(encoding)
    except LookupError:
        raise ToolkitError(f"unknown text encoding {encoding!r}; use e.g. utf-8, latin-1 or cp1252") from None
    if source in SOURCES:
        return
    path = Path(source).expanduser()
    if is_saved_dataset(path):
        return
    if not path.is_file():
        kind = ("a folder, not a text file or a save_to_disk dataset" if path.is_dir()
                else "not a known dataset or an existing file")
        raise ToolkitError(f"text source {source!r} is {kind}: use {', '.join(SOURCES)}, a path to a text file "
                           "or a folder written by datasets' save_to_disk (column 'text')")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ToolkitError(f"cannot read text file {source!r} ({exc.strerror}); check its permissions") from None
    decode_text(raw, source, encoding)


def decode_text(raw: bytes, source: str, encoding: str = "utf-8") -> str:
    """``raw`` decoded with ``encoding``; a binary file or a wrong encoding raises, naming the file and the byte."""
    if b"\x00" in raw[:65536]:
        raise ToolkitError(f"text file {source!r} holds NUL bytes: it is binary, not text; give a plain text file")
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ToolkitError(
            f"text file {source!r} is not valid {encoding} (byte {raw[exc.start:exc.start + 1]!r} at offset "
            f"{exc.start}); pass its encoding, e.g. --encoding latin-1, or convert it with "
            f"`iconv -f latin1 -t utf-8`") from None


def check_window(seq_len: int, windows: int | None, seq_flag: str = "--seqlen",
                 windows_flag: str = "--windows") -> None:
    """Raise unless a window has ≥ 2 tokens (one predicted from another) and the window count is ≥ 1 or None."""
    if seq_len < 2:
        raise ToolkitError(f"{seq_flag} must be ≥ 2 (a window predicts each token from the ones before it), "
                           f"got {seq_len}")
    if windows is not None and windows < 1:
        raise ToolkitError(f"{windows_flag} must be ≥ 1 or 'all', got {windows}")


def check_writable_dir(folder: str | Path, flag: str = "--out") -> Path:
    """Create ``folder`` if needed and prove a file can be written in it; returns it.

    Raises when it is a file, cannot be created, or refuses a write (read-only, permissions, disk full).
    """
    path = Path(folder).expanduser()
    if path.exists() and not path.is_dir():
        raise ToolkitError(f"{flag} {str(folder)!r} is a file, not a folder; give a folder for the run store")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path) as probe:
            probe.write(b"prunelab write check")
            probe.flush()
    except OSError as exc:
        raise ToolkitError(f"cannot write in {flag} {str(folder)!r} ({exc.strerror or exc}); give a writable folder"
                           ) from None
    return path


def check_writable_file(file: str | Path, flag: str = "--json") -> None:
    """Raise unless ``file`` can be written: its folder exists and accepts a file, and it is not a folder."""
    path = Path(file).expanduser()
    if path.is_dir():
        raise ToolkitError(f"{flag} {str(file)!r} is a folder; give a file name")
    parent = path.parent
    if not parent.is_dir():
        raise ToolkitError(f"{flag} {str(file)!r}: folder {str(parent)!r} does not exist; create it first")
    check_writable_dir(parent, flag)
