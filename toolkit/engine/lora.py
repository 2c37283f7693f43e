r"""Masked LoRA: a low-rank update that keeps a pruned model's keep-masks (behind :mod:`toolkit.run.recover`).

A plain LoRA adds ``s·B A`` to a frozen weight ``W``. That product is dense, so it would refill
every weight the pruning removed. Here the update is masked, in the forward pass and in the merge::

    W_eff = W + ΔW,    ΔW = (s · B A) ⊙ M         s = alpha / rank
    W: (out, in) frozen, zero wherever M is False (checked before training)
    M: (out, in) bool keep-mask, True = kept (CONTRIBUTING.md R4)
    B: (out, rank), zeros at the start;  A: (rank, in), peft's Kaiming-uniform initialisation

``⊙ M`` is computed as ``torch.where(M, s·B A, 0)``, not as a product: a non-finite entry of BA
times 0 would be NaN. So every pruned entry of ``W_eff`` is exactly 0 after every step, and
after the merge ``W ← W + ΔW``.

Why a custom peft layer. peft's LoRA forward computes ``B(A x)`` and never forms ``BA``, so it
cannot be masked by a hook on the output. :class:`MaskedLoraLinear` subclasses peft's LoRA
``Linear`` and is registered with ``LoraConfig._register_custom_module`` (peft's experimental API
for custom LoRA layers) for ``nn.Linear`` and GPT-2's ``Conv1D``. peft keeps everything else: the
adapter parameters and their initialisation, freezing the base model, ``merge_and_unload``. The
subclass overrides two methods:

- ``forward``: forms ``W_eff`` and calls ``F.linear(x, W_eff, bias)``. The model that trains is
  exactly the model that is merged. The cost is one extra (out, in) gradient per linear, the
  backward pass of a full fine-tune.
- ``get_delta_weight``: returns the masked ``ΔW``, which peft's merge adds to ``W``.

Adapters are float32 (peft's default upcast) whatever the model's dtype. The merge rounds ``ΔW``
to the model's dtype; a zero stays zero.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from typing import Any, cast

import torch
import torch.nn.functional as F
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora.layer import Linear as LoraLinear
from torch import Tensor, nn

from toolkit.errors import NumericalError, ToolkitError
from toolkit.models.layers import decoder_layers, get_weight, is_linear, layer_linears

ADAPTER = "default"  # peft's adapter name


def _is_conv1d(module: nn.Module) -> bool:
    return type(module).__name__ == "Conv1D"


class MaskedLoraLinear(LoraLinear):
    """peft's LoRA ``Linear`` whose update is ``(s·B A) ⊙ M`` (see the module docstring).

    The keep-mask is set by :func:`add_masked_lora` right after peft creates the layer
    (:meth:`set_keep_mask`). It is a non-persistent buffer, so it moves with the layer and is never
    saved. Until it is set, the layer refuses to run.
    """

    keep_mask: Tensor | None

    def __init__(self, base_layer: nn.Module, adapter_name: str, config: LoraConfig, **kwargs: Any) -> None:
        base = cast(Any, base_layer).get_base_layer() if hasattr(base_layer, "get_base_layer") else base_layer
        super().__init__(base_layer, adapter_name, config=config, is_target_conv_1d_layer=_is_conv1d(base),
                         **kwargs)
        self.register_buffer("keep_mask", None, persistent=False)

    def set_keep_mask(self, keep: Tensor) -> None:
        """Set the (out, in) bool keep-mask of this linear (True = kept)."""
        weight = get_weight(self.get_base_layer())
        if tuple(keep.shape) != tuple(weight.shape):
            raise ToolkitError(f"keep-mask of shape {tuple(keep.shape)} for a weight of shape {tuple(weight.shape)}")
        self.keep_mask = keep.to(device=weight.device, dtype=torch.bool)

    def masked_delta(self, adapter: str = ADAPTER) -> Tensor:
        """ΔW = (s · B A) ⊙ M as (out, in), in the adapters' dtype (float32)."""
        if self.keep_mask is None:
            raise RuntimeError("MaskedLoraLinear used before its keep-mask was set (add_masked_lora sets it)")
        down, up = cast(Tensor, self.lora_A[adapter].weight), cast(Tensor, self.lora_B[adapter].weight)
        product = up @ down  # (out, rank) @ (rank, in) → (out, in)
        return torch.where(self.keep_mask, product * self.scaling[adapter], torch.zeros((), dtype=product.dtype,
                                                                                          device=product.device))

    def effective_weight(self, adapter: str = ADAPTER) -> Tensor:
        """W_eff = W + ΔW as (out, in) float32: the weight this layer computes with while unmerged."""
        return get_weight(self.get_base_layer()).float() + self.masked_delta(adapter).float()

    def get_delta_weight(self, adapter: str) -> Tensor:
        """The masked ΔW in the base layer's storage layout ((in, out) for Conv1D): what peft's merge adds."""
        delta = self.masked_delta(adapter)
        return delta.t() if _is_conv1d(self.get_base_layer()) else delta

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        """The output x W_effᵀ + b, W_eff = W + (s·B A) ⊙ M; the plain base layer when merged or disabled."""
        active = [a for a in self.active_adapters if a in self.lora_A]
        if self.disable_adapters or self.merged or not active:
            return super().forward(x, *args, **kwargs)
        base = self.get_base_layer()
        weight = get_weight(base).float()  # (out, in)
        for adapter in active:
            weight = weight + self.masked_delta(adapter).float()
        bias = cast(Tensor | None, getattr(base, "bias", None))
        out = F.linear(x.float(), weight, None if bias is None else bias.float())
        return out.to(x.dtype)


def linear_names(model: nn.Module) -> dict[nn.Module, tuple[int, str, str]]:
    """Every decoder-layer linear → (layer, name inside the layer, qualified name in ``model``).

    A linear with no weights (a block-scope run removed all its units) is left out: it has nothing
    to adapt.
    """
    qualified = {module: name for name, module in model.named_modules()}
    found = {}
    for index, layer in enumerate(decoder_layers(model)):
        for name, module in layer_linears(layer).items():
            if get_weight(module).numel() > 0:
                found[module] = (index, name, qualified[module])
    return found


def check_rank(model: nn.Module, rank: int) -> None:
    """Raise :class:`ToolkitError` when ``rank`` exceeds min(out, in) of a decoder-layer linear (named)."""
    if rank < 1:
        raise ToolkitError(f"--rank must be ≥ 1, got {rank}")
    limits = [(min(get_weight(m).shape), index, name, tuple(get_weight(m).shape))
              for m, (index, name, _) in linear_names(model).items()]
    if not limits:
        raise ToolkitError("the model has no decoder-layer linears with weights: nothing to recover")
    smallest = min(limits)
    if rank > smallest[0]:
        _, index, name, shape = smallest
        raise ToolkitError(f"--rank {rank} is larger than min(out, in) = {smallest[0]} of layer {index} {name} "
                           f"({shape[0]}×{shape[1]}): use --rank ≤ {smallest[0]}")


def check_masks(model: nn.Module, keep_masks: Mapping[nn.Module, Tensor], run_id: str) -> None:
    """Raise :class:`ToolkitError` when a keep-mask does not fit its linear, or a weight it drops is not zero."""
    for module, (index, name, _) in linear_names(model).items():
        keep, weight = keep_masks[module], get_weight(module)
        if tuple(keep.shape) != tuple(weight.shape):
            raise ToolkitError(f"run {run_id}: the keep-mask of layer {index} {name} has shape {tuple(keep.shape)}, "
                               f"its saved weight {tuple(weight.shape)}; the run folder was changed, pick another run")
        stray = int(torch.count_nonzero(weight[~keep]))
        if stray:
            raise ToolkitError(f"run {run_id}: {stray} weights of layer {index} {name} that its keep-mask drops are "
                               "not zero in the saved model; the run folder was changed, pick another run")


def add_masked_lora(model: nn.Module, keep_masks: Mapping[nn.Module, Tensor], rank: int,
                    alpha: float) -> PeftModel:
    """Wrap ``model`` in a peft model with a :class:`MaskedLoraLinear` on every decoder-layer linear.

    ``keep_masks`` maps each linear (as returned by :func:`linear_names`) to its (out, in) bool
    keep-mask. The base weights are frozen (peft); only the adapters train. ``model`` is changed in
    place (its linears are wrapped) until :func:`merge_masked_lora`. Draws A from torch's global
    generator: seed it first for a reproducible run.
    """
    names = linear_names(model)
    config = LoraConfig(r=rank, lora_alpha=cast(Any, alpha), lora_dropout=0.0, bias="none",
                        target_modules=[qualified for _, _, qualified in names.values()])
    targets: dict[type[nn.Module], type[nn.Module]] = {type(m): MaskedLoraLinear for m in names if is_linear(m)}
    config._register_custom_module(targets)
    with warnings.catch_warnings():  # peft asks transformers a deprecated question; nothing for a user to do
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        peft_model = cast(PeftModel, get_peft_model(cast(Any, model), config))
    for layer in masked_layers(peft_model):
        layer.set_keep_mask(keep_masks[layer.get_base_layer()])
    return peft_model


def masked_layers(model: nn.Module) -> Iterator[MaskedLoraLinear]:
    """The :class:`MaskedLoraLinear` layers of ``model``, in module order."""
    return (m for m in model.modules() if isinstance(m, MaskedLoraLinear))


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters that train (the adapters' A and B)."""
    return [p for p in model.parameters() if p.requires_grad]


def merge_masked_lora(peft_model: PeftModel) -> nn.Module:
    """Merge every masked update into its weight (W ← W + ΔW, in the weight's dtype); returns the plain model.

    Raises :class:`NumericalError` when an update is not finite (peft's safe merge finds it).
    """
    try:
        return cast(nn.Module, peft_model.merge_and_unload(safe_merge=True))
    except ValueError as exc:
        raise NumericalError(f"the recovery update is not finite ({exc}); lower --lr") from None


def pruned_entries_nonzero(model: nn.Module, keep_masks: Mapping[nn.Module, Tensor]) -> int:
    """How many weights the keep-masks drop are not exactly zero, in the effective weights of ``model``.

    Works on the wrapped model (each layer's W + ΔW) and on the merged one (each linear's weight).
    """
    count = 0
    with torch.no_grad():
        wrapped = {layer.get_base_layer(): layer for layer in masked_layers(model)}
        for module, keep in keep_masks.items():
            layer = wrapped.get(module)
            weight = layer.effective_weight() if layer is not None else get_weight(module)
            count += int(torch.count_nonzero(weight[~keep.to(weight.device)]))
    return count
