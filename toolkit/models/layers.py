"""Find a model's decoder layers and their linears; read and write a linear's weight as (out, in)."""

from __future__ import annotations

from typing import cast

from torch import Tensor, nn

from toolkit.errors import ToolkitError


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layer list: the ModuleList of linear-holding blocks with the most parameters."""
    best, best_size = None, 0
    for module in model.modules():
        if not isinstance(module, nn.ModuleList) or len(module) == 0:
            continue
        if not all(any(is_linear(m) for m in block.modules()) for block in module):
            continue
        size = sum(p.numel() for p in module.parameters())
        if size > best_size:
            best, best_size = module, size
    if best is None:
        raise ToolkitError(f"found no decoder layers in {type(model).__name__}: not a transformer decoder?")
    return best


def is_linear(module: nn.Module) -> bool:
    """nn.Linear or a transformers Conv1D (GPT-2)."""
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def layer_linears(layer: nn.Module) -> dict[str, nn.Module]:
    """Qualified name (inside the layer) → prunable linear module, in definition order."""
    return {name: m for name, m in layer.named_modules() if is_linear(m)}


def get_weight(module: nn.Module) -> Tensor:
    """The weight as (out, in), whatever the storage (Conv1D stores (in, out))."""
    weight = cast(Tensor, module.weight).data
    return weight.t() if type(module).__name__ == "Conv1D" else weight


def set_weight_(module: nn.Module, weight: Tensor) -> None:
    """Write an (out, in) weight back in the module's storage layout and dtype (in place)."""
    data = weight.t() if type(module).__name__ == "Conv1D" else weight
    stored = cast(Tensor, module.weight)
    stored.data.copy_(data.to(stored.dtype))
