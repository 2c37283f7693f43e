"""PruneLab: post-training compression of LLMs.

``toolkit.load_model(name)`` is :func:`toolkit.models.load.load_model` (the embedded model, a tiny test
model, a hub id, a .gguf or a saved folder, structurally pruned ones with their per-layer shapes
rebuilt). It is imported on first use, so ``import toolkit`` stays free of torch (the UI modules
rely on that).
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """Lazy ``toolkit.load_model``."""
    if name == "load_model":
        from toolkit.models.load import load_model

        return load_model
    raise AttributeError(f"module 'toolkit' has no attribute {name!r}")
