"""Honest accounting of what a run did to a model: parameters, kept weights, bits, bytes.

Counted over the linears of the decoder layers (the ones a method compresses), from what the
engine recorded and from the module shapes, never from exact zeros (a group-128 INT2 grid alone
makes about 60% exact zeros on random weights):

- ``params_before`` / ``params_after``: weights of those linears before the run and after it,
  from the actual module shapes (a block-scope method that removes heads or channels shrinks them);
- ``nonzeros_kept``: weights the keep-masks keep (a linear without a recorded mask keeps all of
  its current weights);
- ``sparsity`` = 1 − nonzeros_kept / params_before (removed units count as pruned);
- ``bits_per_weight``, the run's one bits-per-weight figure: the bits of those linears divided by
  their weights (``params_after``). A quantized linear counts b bits of code per weight plus, per
  group, a 16-bit scale and (asymmetric grids) a b-bit zero point
  (:func:`toolkit.methods.quant_grid.bits_per_weight`); a dense one the bits of its dtype (masks do
  not shrink a dense checkpoint). ``bits_counted`` says this in words. The layer table's ``bits``
  column is the same figure per decoder layer (weighted by weights). A saved pack-quantized
  checkpoint's own ``bits_per_weight`` is a different thing: the bytes its quantized tensors take
  on disk (codes packed in int32 words, scales in the checkpoint's dtype, zero points, shapes) × 8
  per weight (:mod:`toolkit.models.save_quant`);
- ``estimated_bytes``: the model's parameters (tied ones once; buffers left out) stored with the
  quantized linears packed at their bits per weight and everything else dense in its dtype;
- ``checkpoint_bytes``: the measured size on disk of a saved checkpoint (None when not saved).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from torch import Tensor, nn

from toolkit.methods.quant_grid import SCALE_BITS, bits_per_weight
from toolkit.models.layers import decoder_layers, get_weight, layer_linears
from toolkit.spec.compression import QuantSpec

LinearKey = tuple[int, str]  # (decoder layer, qualified linear name inside it)


@dataclass(frozen=True)
class Accounting:
    """What the compressed model costs (see the module docstring for each number)."""

    params_before: int
    params_after: int
    nonzeros_kept: int
    sparsity: float
    bits_per_weight: float
    estimated_bytes: int
    checkpoint_bytes: int | None = None
    bits_counted: str = ""  # what bits_per_weight counts, in words (the summary prints it beside the figure)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (result.json ``accounting``)."""
        return asdict(self)


def linear_shapes(model: nn.Module) -> dict[LinearKey, tuple[int, int]]:
    """(out, in) of every decoder-layer linear, keyed by (layer, name)."""
    return {(index, name): tuple(get_weight(module).shape)  # type: ignore[misc]
            for index, layer in enumerate(decoder_layers(model)) for name, module in layer_linears(layer).items()}


def account(
    model: nn.Module, before: Mapping[LinearKey, tuple[int, int]], kept: Mapping[LinearKey, int],
    quant: Mapping[LinearKey, QuantSpec],
) -> Accounting:
    """The accounting of ``model`` after a run.

    Given the linear shapes ``before`` it, the weights each linear's keep-mask kept and the grids of the
    quantized linears.
    """
    params_before = sum(rows * cols for rows, cols in before.values())
    params_after = nonzeros = 0
    bits_total = 0.0
    linear_weights: dict[int, float] = {}  # id(weight tensor) → storage bits of that tensor
    counted: dict[str, int] = {}  # what each linear's bits count → weights counted that way
    for index, layer in enumerate(decoder_layers(model)):
        for name, module in layer_linears(layer).items():
            rows, cols = get_weight(module).shape
            numel = rows * cols
            params_after += numel
            nonzeros += min(kept.get((index, name), numel), numel)
            spec = quant.get((index, name))
            weight = cast(Tensor, module.weight)
            bits = bits_per_weight(spec, cols) if spec is not None else weight.element_size() * 8.0
            bits_total += bits * numel
            what = _bits_counted(spec, weight)
            counted[what] = counted.get(what, 0) + numel
            linear_weights[id(weight)] = bits * numel
    return Accounting(
        params_before=params_before, params_after=params_after, nonzeros_kept=nonzeros,
        sparsity=1.0 - nonzeros / params_before if params_before else 0.0,
        bits_per_weight=bits_total / params_after if params_after else math.nan,
        estimated_bytes=_estimated_bytes(model, linear_weights),
        bits_counted=", ".join(counted) + " per weight of the decoder-layer linears",
    )


def _bits_counted(spec: QuantSpec | None, weight: Tensor) -> str:
    """What one linear's bits count: "int4:g128 codes + 16-bit scales + 4-bit zero points", "float32 values"."""
    if spec is None:
        return f"{str(weight.dtype).removeprefix('torch.')} values ({weight.element_size() * 8} bits)"
    zeros = "" if spec.symmetric else f" + {spec.bits}-bit zero points"
    return f"{spec.label} codes + {SCALE_BITS}-bit scales{zeros}"


def dense_bytes(model: nn.Module) -> int:
    """Bytes of the model's parameters stored dense, each in its dtype (tied ones once; buffers left out)."""
    return _estimated_bytes(model, {})


def _estimated_bytes(model: nn.Module, linear_bits: Mapping[int, float]) -> int:
    seen: set[int] = set()
    total = 0.0
    for tensor in model.parameters():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        total += linear_bits[id(tensor)] / 8 if id(tensor) in linear_bits else tensor.numel() * tensor.element_size()
    return math.ceil(total)


def folder_bytes(path: str | Path) -> int:
    """Bytes of every file under ``path`` (a saved checkpoint folder)."""
    return sum(file.stat().st_size for file in Path(path).rglob("*") if file.is_file())


def weights_bytes(path: str | Path) -> int:
    """Bytes of the ``*.safetensors`` files under ``path``: the weights, without tokenizer and config."""
    return sum(file.stat().st_size for file in Path(path).rglob("*.safetensors") if file.is_file())
