"""Compare two runs of the same pruning that differ only in float summation order (fused vs multi-pass,
one worker vs two, this CPU vs the one a reference was written on).

What is guaranteed, and so what :func:`assert_same_pruning` checks, walking the linears in pruning order:

- until the first linear whose keep-masks differ, the masks are equal, the weights both runs keep agree
  within tolerance, and so do the reconstruction errors;
- at that first linear the masks differ only at ties: the same number of weights is kept, and (for methods
  whose selection score is the final |w|, e.g. FISTAPruner's rounding and magnitude) every weight one run
  keeps and the other drops lies within :data:`TIE` of the smallest |w| that run keeps;
- after it, later linears see inputs that differ by more than rounding (a tie went the other way), so only
  what a tie can change little is compared: the same number of weights kept, at most 1% of the mask
  entries different, reconstruction and layer output errors within 1%.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from toolkit.events import Event, LayerDone, SublayerPruned
from toolkit.models.layers import decoder_layers, get_weight, layer_linears

TIE = 1e-6  # |w| of a weight kept by one run only, minus that run's smallest kept |w| (a near-tie)
Key = tuple[int, str]


@dataclass
class Pruned:
    """One run: keep-masks and final weights per (layer, linear), errors, the order linears were pruned in."""

    masks: dict[Key, torch.Tensor] = field(default_factory=dict)
    weights: dict[Key, torch.Tensor] = field(default_factory=dict)
    rel_errors: dict[Key, float] = field(default_factory=dict)
    output_errors: dict[int, float] = field(default_factory=dict)  # decoder layer → ‖Y* − Y‖/‖Y‖
    order: list[Key] = field(default_factory=list)

    def on_mask(self, layer: int, name: str, keep: torch.Tensor) -> None:
        """The engine's mask sink."""
        self.masks[(layer, name)] = keep.clone()

    def finish(self, model: torch.nn.Module, events: list[Event]) -> Pruned:
        """Read the final weights from ``model`` and the errors from ``events``."""
        for index, layer in enumerate(decoder_layers(model)):
            for name, module in layer_linears(layer).items():
                self.weights[(index, name)] = get_weight(module).detach().clone()
        for event in events:
            if isinstance(event, SublayerPruned):
                self.rel_errors[(event.layer, event.name)] = event.rel_error
                self.order.append((event.layer, event.name))
            elif isinstance(event, LayerDone):
                self.output_errors[event.layer] = event.output_rel_error
        return self


def assert_same_pruning(a: Pruned, b: Pruned, *, score_is_weight: bool, rtol: float = 1e-3,
                        atol: float = 1e-4) -> None:
    """Assert that ``a`` and ``b`` are the same pruning up to float summation order (module docstring);
    ``b``'s order of pruning is the one walked (``a`` may have pruned layers concurrently)."""
    assert sorted(a.order) == sorted(b.order), "the runs pruned different linears"
    flipped_at: int | None = None  # decoder layer of the first tie that went the other way
    for key in b.order:
        keep_a, keep_b = a.masks[key], b.masks[key]
        differ = keep_a != keep_b
        assert int(keep_a.sum()) == int(keep_b.sum()), f"{key}: different numbers of weights kept"
        if flipped_at is None:
            if bool(differ.any()):
                flipped_at = key[0]
                if score_is_weight:
                    _assert_ties(key, keep_a, keep_b, a.weights[key], b.weights[key])
                assert float(differ.float().mean()) <= 0.01, f"{key}: {int(differ.sum())} mask entries differ"
            both = keep_a & keep_b
            torch.testing.assert_close(a.weights[key][both], b.weights[key][both], rtol=rtol, atol=atol)
            assert a.rel_errors[key] == pytest.approx(b.rel_errors[key], rel=rtol, abs=1e-6), key
        else:
            assert float(differ.float().mean()) <= 0.01, f"{key}: {int(differ.sum())} mask entries differ"
            assert a.rel_errors[key] == pytest.approx(b.rel_errors[key], rel=0.01, abs=1e-6), key
    assert sorted(a.output_errors) == sorted(b.output_errors)
    for layer, error_b in b.output_errors.items():
        close = rtol if flipped_at is None or layer < flipped_at else 0.01
        assert a.output_errors[layer] == pytest.approx(error_b, rel=close, abs=1e-6), f"layer {layer} output error"


def _assert_ties(key: Key, keep_a: torch.Tensor, keep_b: torch.Tensor, weight_a: torch.Tensor,
                 weight_b: torch.Tensor) -> None:
    for keep, other, weight in ((keep_a, keep_b, weight_a), (keep_b, keep_a, weight_b)):
        only = keep & ~other
        if bool(only.any()):
            threshold = weight[keep].abs().min()
            gap = float((weight[only].abs() - threshold).max())
            assert gap <= TIE, f"{key}: a weight kept by one run only is {gap:.2e} above its threshold (not a tie)"
