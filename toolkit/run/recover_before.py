"""The perplexity before a recovery: the parent's own record when it was measured on the same windows.

A saved run reloads at the perplexity it reported (``tests/models/test_chains.py``,
``tests/models/test_save.py``), so measuring the parent's checkpoint again on the same windows repeats work that
is already recorded: on the embedded model's CPU protocol that is 210 windows of 512 tokens. The
recovery reuses the parent's figure when the parent's ``result.json`` has a finite perplexity on
the same dataset, split, window length and window count; otherwise (``--eval-windows`` cut the
windows, an older record without a protocol) it measures.
"""

from __future__ import annotations

import math
from typing import Any


def recorded_before(result: dict[str, Any], dataset: str, seqlen: int, windows: int) -> float | None:
    """The parent's recorded perplexity on ``dataset`` if it was measured on these windows, else None."""
    evaluation = (result.get("protocol") or {}).get("evaluation") or {}
    value = (result.get("ppl") or {}).get(dataset)
    same = (evaluation.get("dataset") == dataset and evaluation.get("split", "test") == "test"
            and evaluation.get("seqlen") == seqlen and evaluation.get("windows") == windows)
    if not same or isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
