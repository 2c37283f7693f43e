"""Statistics of the inputs of o_proj and down_proj of one decoder layer (block-scope methods).

One pass of the layer over every calibration batch, with forward pre-hooks on the two output
projections (:func:`toolkit.engine.stats.capture_inputs`), accumulates for each input x ∈ R^in

    G = Σ x xᵀ / N   (upper triangle while summing, :func:`toolkit.engine.stats.add_gram_upper_`),
    μ = Σ x / N,     N = tokens seen,

in float32 on the layer's device, and keeps the layer's outputs (the next layer's inputs).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from toolkit.engine.capture import LayerInputs, run_layer
from toolkit.engine.stats import add_gram_upper_, capture_inputs, symmetrize_
from toolkit.errors import NumericalError, RunCancelled
from toolkit.methods.base import SOLVER_DTYPE
from toolkit.methods.block.base import BlockStats, InputStats
from toolkit.models.structure import BlockView


class InputAccumulator:
    """Running Σxxᵀ (upper triangle), Σx and N of one linear's input."""

    def __init__(self, width: int, device: torch.device) -> None:
        self.gram = torch.zeros(width, width, dtype=SOLVER_DTYPE, device=device)
        self.sum = torch.zeros(width, dtype=SOLVER_DTYPE, device=device)
        self.count = 0

    def add(self, x: Tensor) -> None:
        """Accumulate a batch of activations (..., in)."""
        flat = x.reshape(-1, x.shape[-1]).to(SOLVER_DTYPE)
        add_gram_upper_(self.gram, flat)
        self.sum += flat.sum(0)
        self.count += flat.shape[0]

    def finish(self, where: str) -> InputStats:
        """Means over the tokens; raises :class:`NumericalError` on no tokens or non-finite values."""
        if self.count == 0:
            raise NumericalError(f"{where}: no calibration tokens reached this linear")
        stats = InputStats(gram=symmetrize_(self.gram).div_(self.count), mean=self.sum / self.count, count=self.count)
        if not (torch.isfinite(stats.gram).all() and torch.isfinite(stats.mean).all()):
            raise NumericalError(f"{where}: non-finite (NaN/Inf) activations in the calibration statistics; "
                                 "check the model weights (try --device cpu or a float32 checkpoint)")
        return stats


def gather_block_stats(
    view: BlockView, inputs: LayerInputs, heads: bool, channels: bool, cancelled: Callable[[], bool]
) -> tuple[BlockStats, list[Tensor]]:
    """Run ``view.layer`` (already on its device) over every batch of ``inputs``.

    Returns the statistics of o_proj's input (when ``heads``) and down_proj's input (when
    ``channels``) and the layer's outputs per batch. Raises :class:`RunCancelled` between batches.
    """
    device = view.linear("o").weight.device
    roles = [role for role, on in (("o", heads), ("down", channels)) if on]
    acc = {role: InputAccumulator(view.linear(role).in_features, device) for role in roles}
    outputs: list[Tensor] = []
    with capture_inputs({role: view.linear(role) for role in roles}, lambda role, x: acc[role].add(x)):
        for batch in range(len(inputs.hidden)):
            if cancelled():
                raise RunCancelled("cancelled")
            outputs.append(run_layer(view.layer, inputs, batch))
    done = {role: a.finish(view.name(role)) for role, a in acc.items()}
    return BlockStats(attn=done.get("o"), mlp=done.get("down")), outputs
