"""A quantizing run's checkpoint: its states gathered during the run, checked and saved at the end.

The engine hands every linear's keep-mask and quantization state to its sinks (on the CPU);
:class:`StateCollector` keeps them under the linear's qualified name, with the codes of pruned
weights set to their group's zero point (so they dequantize to exactly 0, as the model holds
them). :func:`save_run_checkpoint` writes them with :func:`toolkit.models.save_quant.save_quantized`
as a compressed-tensors ``pack-quantized`` checkpoint and reports its size.

What the format keeps for a pruned and quantized model: every weight, pruned ones included, as a
b-bit code (a pruned weight is its group's zero-point code), plus the scales and zero points.
There is no sparse layout in ``pack-quantized``, so sparsity does not shrink the file; a sparse
runtime would add a bitmask (1 bit per weight, or 2 bits per 4 for 2:4) and store only the kept
codes, and would skip the zeros at inference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from toolkit.errors import ToolkitError
from toolkit.methods.quant_grid import QuantState, group_width, mask_state
from toolkit.models.layers import decoder_layers, get_weight, layer_linears
from toolkit.models.save_quant import save_quantized
from toolkit.models.tokenizers import TextCodec
from toolkit.spec.compression import QuantSpec

LinearKey = tuple[int, str]  # (decoder layer, linear name inside it)

SPARSE_NOTE = ("pack-quantized has no sparse layout: pruned weights are stored as their group's zero-point code "
               "(exactly 0 after dequantization), so sparsity does not shrink this file; a sparse runtime would "
               "add a bitmask (1 bit/weight) and store only the kept codes")


def qualified_names(model: nn.Module) -> dict[LinearKey, str]:
    """(layer, name) → the linear's name in ``model.named_modules()`` for every decoder-layer linear."""
    prefix = {id(layer): name for name, layer in model.named_modules()}
    return {(index, name): f"{prefix[id(layer)]}.{name}"
            for index, layer in enumerate(decoder_layers(model)) for name in layer_linears(layer)}


def check_savable(model: nn.Module, spec: QuantSpec) -> None:
    """Refuse, before any weight changes, a ``--save-model`` the pack-quantized format cannot hold.

    Every decoder-layer linear must be an ``nn.Linear`` whose input width is a whole number of
    groups (a remainder group is quantized in memory, but compressed-tensors stores whole groups).
    """
    for index, layer in enumerate(decoder_layers(model)):
        for name, module in layer_linears(layer).items():
            if not isinstance(module, nn.Linear):
                raise ToolkitError(f"--save-model with --quant: layer {index} {name} is a {type(module).__name__}; "
                                   "the pack-quantized checkpoint holds nn.Linear only (drop --save-model)")
            cols = get_weight(module).shape[1]
            width = group_width(spec, cols)
            if cols % width:
                raise ToolkitError(
                    f"--save-model with {spec.label}: layer {index} {name} has {cols} inputs, not a multiple of "
                    f"the group size {width}; compressed-tensors stores whole groups only (without --save-model "
                    "the last group of a row is narrower): use a group size that divides every width, or g0")


@dataclass
class StateCollector:
    """The sinks of a quantizing run: keep-masks and states by (layer, name), on the CPU."""

    states: dict[LinearKey, QuantState] = field(default_factory=dict)
    keeps: dict[LinearKey, Tensor] = field(default_factory=dict)

    def mask(self, layer: int, name: str, keep: Tensor) -> None:
        """Keep a keep-mask (out, in) bool that drops something (all-True masks are not stored)."""
        if not bool(keep.all()):
            self.keeps[(layer, name)] = keep

    def quant(self, layer: int, name: str, state: QuantState) -> None:
        """Keep a linear's state, with zero-point codes where its keep-mask (given first) is False."""
        keep = self.keeps.get((layer, name))
        self.states[(layer, name)] = state if keep is None else mask_state(state, keep)

    @property
    def sparse(self) -> bool:
        """True when some quantized linear was also pruned."""
        return bool(self.keeps)

    def named(self, model: nn.Module) -> dict[str, QuantState]:
        """The states under the linears' qualified names (what :func:`save_quantized` takes)."""
        names = qualified_names(model)
        return {names[key]: state for key, state in self.states.items()}


def save_run_checkpoint(model: nn.Module, codec: TextCodec, folder: Path, collected: StateCollector
                        ) -> dict[str, Any]:
    """Write the pack-quantized checkpoint of a run into ``folder``; returns its report.

    The report (result.json ``checkpoint``) holds ``bytes`` on disk, ``bits_per_weight`` of the
    quantized linears (codes, scales and zero points as stored), ``dense_bf16_bytes`` of the whole
    model, ``size_vs_dense_bf16`` and, for a pruned and quantized model, ``sparse_note`` (what the
    format keeps). Scales are stored in the model's dtype. Raises ToolkitError when nothing was quantized.
    """
    report = save_quantized(model, codec, folder, collected.named(model))
    return report | ({"sparse_note": SPARSE_NOTE} if collected.sparse else {})
