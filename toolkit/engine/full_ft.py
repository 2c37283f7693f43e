r"""Full fine-tuning that keeps the keep-masks: the decoder-layer linears train directly (``recover --train full``).

Every decoder-layer linear weight ``W`` (out, in), with its bool keep-mask ``M`` (True = kept,
CONTRIBUTING.md R4), is a trained parameter; everything else is frozen (embeddings, norms, biases,
the output layer), as with LoRA. One step of :func:`toolkit.engine.finetune.train` is::

    G   = ∇_W L ⊙ M                          (a gradient hook: torch.where(M, G, 0))
    G  ← G · min(1, c / ‖G_all‖₂)            (the global norm over all trained weights, c = CLIP_NORM)
    m  ← β₁ m + (1 − β₁) G,   v ← β₂ v + (1 − β₂) G²          (AdamW, β = (0.9, 0.999), ε = 1e-8)
    W  ← W − η_t · m̂ / (√v̂ + ε)              (no weight decay; m̂, v̂ bias-corrected)
    W  ← where(M, W, 0)                      (after every step: :meth:`FullTraining.after_step`)

A dropped entry's gradient is 0 at every step, so its AdamW moments stay 0 and its update is 0; the
last line makes the guarantee exact whatever the arithmetic. The AdamW states (m, v) exist for the
trained linears only. The model trains in float32: a model stored in bfloat16 or float16 is upcast
for the training and rounded back by :meth:`FullTraining.finish` (a zero stays zero).

A shrunk model (fewer heads, channels or layers) trains in its own shapes: its linears are simply
smaller, and its keep-masks are its nonzero patterns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from toolkit.errors import ToolkitError


def _storage(module: nn.Module, keep: Tensor) -> Tensor:
    """The (out, in) keep-mask in the weight's storage layout ((in, out) for GPT-2's Conv1D)."""
    return keep.t() if type(module).__name__ == "Conv1D" else keep


class FullTraining:
    """The trained weights of a full fine-tune with their masks; :func:`start_full` makes one.

    ``params`` are the trained weights (the AdamW parameters); :meth:`after_step` re-applies the
    keep-masks; :meth:`finish` freezes them again, removes the hooks and restores the model's dtype.
    """

    def __init__(self, model: nn.Module, masks: Mapping[nn.Module, Tensor]) -> None:
        self.model = model
        first = next(model.parameters())
        self.dtype = first.dtype
        self._keep: dict[nn.Parameter, Tensor] = {}
        self._hooks: list[RemovableHandle] = []
        model.requires_grad_(False)
        if self.dtype != torch.float32:
            model.float()
        for module, keep in masks.items():
            weight = module.weight
            if not isinstance(weight, nn.Parameter):
                raise ToolkitError(f"{type(module).__name__} has no trainable weight: full training needs linears")
            stored = _storage(module, keep).to(device=weight.device, dtype=torch.bool)
            if tuple(stored.shape) != tuple(weight.shape):
                raise ToolkitError(f"keep-mask of shape {tuple(keep.shape)} for a weight of shape "
                                   f"{tuple(weight.shape)}")
            weight.requires_grad_(True)
            self._keep[weight] = stored
            self._hooks.append(weight.register_hook(self._masker(weight)))

    def _masker(self, weight: nn.Parameter) -> Callable[[Tensor], Tensor]:
        def mask(grad: Tensor) -> Tensor:
            keep = self._keep[weight]
            return torch.where(keep.to(grad.device), grad, torch.zeros((), dtype=grad.dtype, device=grad.device))
        return mask

    @property
    def params(self) -> list[nn.Parameter]:
        """The trained weights, in module order."""
        return list(self._keep)

    @property
    def trained(self) -> int:
        """How many weights train (the kept entries; a dropped one never moves)."""
        return sum(int(keep.sum()) for keep in self._keep.values())

    def after_step(self) -> None:
        """Set every dropped entry to exactly 0 (the last line of the update rule)."""
        with torch.no_grad():
            for weight, keep in self._keep.items():
                keep = keep.to(weight.device)
                self._keep[weight] = keep
                weight.masked_fill_(~keep, 0)

    def dropped_nonzero(self) -> int:
        """How many dropped entries are not exactly 0 now (0 after every step)."""
        with torch.no_grad():
            return sum(int(torch.count_nonzero(w[~k.to(w.device)])) for w, k in self._keep.items())

    def finish(self) -> nn.Module:
        """Freeze the weights, remove the hooks, round back to the model's dtype; returns the model."""
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()
        self.model.requires_grad_(False)
        if self.dtype != torch.float32:
            self.model.to(self.dtype)
        self.after_step()  # the rounding keeps zeros; this states it
        return self.model


def start_full(model: nn.Module, masks: Mapping[nn.Module, Tensor]) -> FullTraining:
    """Make every linear in ``masks`` (linear → (out, in) bool keep-mask) trainable with its mask enforced.

    The rest of ``model`` is frozen. Raises :class:`ToolkitError` when a mask does not fit its weight.
    """
    if not masks:
        raise ToolkitError("the model has no decoder-layer linears with weights: nothing to recover")
    return FullTraining(model, masks)
