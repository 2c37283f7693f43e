"""Provenance stamped on every result (STYLE R10): versions, git hash, peak memory, dense-ppl cache."""

from __future__ import annotations

import json
import platform
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

from toolkit.models import cache_dir


def versions() -> dict[str, str]:
    """torch / transformers / python versions and the git hash of the checkout (if any)."""
    import torch
    import transformers

    try:
        git = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).parent, check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        git = ""
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git": git or "unknown",
    }


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _dense_cache_file() -> Path:
    return cache_dir() / "dense_ppl.json"


def cached_dense_ppl(key: dict[str, Any]) -> float | None:
    """A dense perplexity measured before under exactly this protocol ``key``, or None."""
    try:
        table = json.loads(_dense_cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = table.get(json.dumps(key, sort_keys=True))
    return float(value) if isinstance(value, int | float) else None


def store_dense_ppl(key: dict[str, Any], ppl: float) -> None:
    """Remember a dense perplexity for this protocol ``key``."""
    path = _dense_cache_file()
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        table = {}
    table[json.dumps(key, sort_keys=True)] = ppl
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(table, indent=1), encoding="utf-8")
    tmp.replace(path)
