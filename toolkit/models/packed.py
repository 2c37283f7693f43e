"""Read a compressed-tensors ``pack-quantized`` state dict back into float weights, for a model we built.

``from_pretrained`` dequantizes a pack-quantized checkpoint itself (:mod:`toolkit.models.load`), but
only for a model its config describes. A per-layer shrunk checkpoint (:mod:`toolkit.models.shrunk`)
is rebuilt by PruneLab first, so its packed tensors are decoded here, by the compressed-tensors
library (never by hand): each quantized linear's ``weight_packed``, ``weight_scale``,
``weight_zero_point`` and ``weight_shape`` become its ``weight``, with the config group whose
targets match the linear (exact names as :mod:`toolkit.models.save_quant` writes them, class names
or ``re:`` patterns as other writers do).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from toolkit.errors import ToolkitError

PACKED = "weight_packed"


def _schemes(model: nn.Module, quantization_config: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """Module name → the QuantizationScheme that quantizes it, and the config's format."""
    from compressed_tensors.quantization import QuantizationConfig
    from compressed_tensors.utils import match_named_modules

    config: Any = QuantizationConfig.model_validate(quantization_config)
    found: dict[str, Any] = {}
    for scheme in config.config_groups.values():
        for name, _ in match_named_modules(model, scheme.targets, config.ignore):
            found.setdefault(name, scheme)
    return found, config.format


def dequantize_state(state: dict[str, torch.Tensor], model: nn.Module, quantization_config: dict[str, Any],
                     dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``state`` with every packed linear replaced by its dequantized ``<name>.weight`` in ``dtype``.

    ``state`` maps checkpoint keys to tensors; ``model`` is the model the keys belong to (already at
    the saved shapes) and ``quantization_config`` the ``quantization_config`` of config.json.
    Returns a new dict (``state`` is not modified). Raises :class:`ToolkitError` for a packed
    linear no config group targets.
    """
    from compressed_tensors.compressors import BaseCompressor

    schemes, default_format = _schemes(model, quantization_config)
    names = [key.removesuffix(f".{PACKED}") for key in state if key.endswith(f".{PACKED}")]
    out = dict(state)
    for name in names:
        scheme = schemes.get(name)
        if scheme is None:
            raise ToolkitError(f"{name} is packed in the checkpoint but no quantization_config group targets it; "
                               "the checkpoint's config.json does not belong to its weights")
        keys = [key for key in out if key.startswith(f"{name}.weight_")]  # packed, scale, zero point, shape
        local: dict[str, Any] = {key.removeprefix(f"{name}."): out.pop(key) for key in keys}
        compressor = BaseCompressor.get_value_from_registry(scheme.format or default_format)
        weight: Any = compressor.decompress(local, scheme)["weight"]
        out[f"{name}.weight"] = weight.to(dtype)
    return out
