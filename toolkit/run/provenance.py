"""Provenance stamped on every result (CONTRIBUTING.md R10): versions, git hash, peak memory, dense-result caches.

:func:`cached_value` / :func:`store_value` keep one JSON table per cache under the cache folder:
``dense_ppl`` (perplexities) and ``dense_zero_shot`` (task scores, :mod:`toolkit.run.evals`), both
keyed by :func:`model_key` plus what was measured.

The dense-perplexity cache is keyed by content, never by names alone: the evaluation protocol, a
hash of the very token windows scored (text, tokenizer, seqlen and BOS all change it), a hash of the
model's config and a stamp of the weights on disk (size, mtime and a hash of the first and last MiB
of a file; size and mtime of every file of a folder). Replacing a .gguf, a checkpoint or a text
file therefore measures again instead of reusing a stale number.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.models.sources import cache_dir
from toolkit.runtime.rss import peak_rss_mib

if TYPE_CHECKING:
    from torch import Tensor

    from toolkit.models.load import LoadedModel

_EDGE = 2**20  # bytes hashed at each end of a weights file


@functools.cache
def git_head() -> str:
    """The checkout's short git hash at the first call in this process ("" outside a checkout).

    Cached: the code a process runs is the code it imported, so a commit made while a long run goes
    on must not rename it. Runs ask once before their model loads (:func:`toolkit.run.pipeline.prepare`).
    """
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).parent, check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def versions() -> dict[str, str]:
    """Torch / transformers / python versions and the git hash of the checkout (if any, see :func:`git_head`)."""
    import torch
    import transformers

    git = git_head()
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git": git or "unknown",
    }


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, MiB (:func:`toolkit.runtime.rss.peak_rss_mib`)."""
    return peak_rss_mib()


def _cache_file(table: str) -> Path:
    return cache_dir() / f"{table}.json"


def cached_value(table: str, key: dict[str, Any]) -> Any:
    """The value remembered in cache ``table`` under exactly ``key``, or None."""
    try:
        entries = json.loads(_cache_file(table).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return entries.get(json.dumps(key, sort_keys=True))


def store_value(table: str, key: dict[str, Any], value: Any) -> None:
    """Remember a JSON-able ``value`` in cache ``table`` under ``key`` (written atomically)."""
    path = _cache_file(table)
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        entries = {}
    entries[json.dumps(key, sort_keys=True)] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entries, indent=1), encoding="utf-8")
    tmp.replace(path)


def cached_dense_ppl(key: dict[str, Any]) -> float | None:
    """A dense perplexity measured before under exactly this protocol ``key``, or None."""
    value = cached_value("dense_ppl", key)
    return float(value) if isinstance(value, int | float) else None


def store_dense_ppl(key: dict[str, Any], ppl: float) -> None:
    """Remember a dense perplexity for this protocol ``key``."""
    store_value("dense_ppl", key, ppl)


def _file_stamp(path: Path) -> list[Any]:
    """Size, mtime and a hash of the first and last MiB of a file."""
    stat = path.stat()
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        digest.update(handle.read(_EDGE))
        if stat.st_size > 2 * _EDGE:
            handle.seek(-_EDGE, 2)
        digest.update(handle.read(_EDGE))
    return [stat.st_size, stat.st_mtime_ns, digest.hexdigest()[:16]]


def weights_stamp(source: Path | None) -> Any:
    """What identifies the weights read from ``source``.

    A file's stamp, or name, size and mtime of every file of a folder; None for models built in memory or
    fetched from the hub.
    """
    if source is None:
        return None
    if source.is_file():
        return _file_stamp(source)
    return sorted([f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in source.iterdir() if f.is_file())


def model_key(loaded: LoadedModel) -> dict[str, Any]:
    """What identifies the dense model of ``loaded``: name, weights on disk, revision, config hash."""
    config: Any = getattr(loaded.model, "config", None)
    return {
        "model": loaded.name,
        "weights": weights_stamp(loaded.source),
        "revision": getattr(config, "_commit_hash", None),
        "config": hashlib.sha256(config.to_json_string().encode()).hexdigest()[:16],
    }


def dense_ppl_key(loaded: LoadedModel, windows: Tensor, evaluation: dict[str, Any]) -> dict[str, Any]:
    """The dense-perplexity cache key of ``loaded`` scored on ``windows`` under ``evaluation``."""
    return {**evaluation, **model_key(loaded),
            "windows": hashlib.sha256(windows.cpu().numpy().tobytes()).hexdigest()[:16]}
