"""Benchmark records written as a JSON-lines file, as ``benchmarks/results/`` holds them (results-page tests)."""

from __future__ import annotations

import json
from pathlib import Path


def write_jsonl(path: Path, records: list[dict]) -> Path:
    """``records`` one JSON object a line at ``path``; returns ``path``."""
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path
