"""Seeded calibration statistics for solver tests."""

from __future__ import annotations

import torch

from toolkit.methods.base import LinearStats


def correlated_stats(width: int, tokens: int = 4096, seed: int = 0) -> tuple[torch.Tensor, LinearStats]:
    """Inputs X (tokens, width) with a random covariance (correlated features) and their Gram mean."""
    gen = torch.Generator().manual_seed(seed)
    mix = torch.randn(width, width, generator=gen) / width**0.5
    scale = torch.exp(torch.randn(width, generator=gen))  # uneven column norms, as in LLM activations
    X = torch.randn(tokens, width, generator=gen) @ mix * scale
    return X, LinearStats(gram=X.T @ X / tokens, count=tokens)
