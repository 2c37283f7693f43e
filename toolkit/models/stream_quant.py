"""Streamed pack-quantized checkpoints: each decoder layer's linears packed as the layer is written, and read back.

The writing side of ``--stream --quant``: :class:`LayerPacker` takes the quantization states of one decoder
layer (given by the engine's sinks as the layer is compressed, masked as
:class:`toolkit.models.quant_checkpoint.StateCollector` masks them), turns each quantized linear's ``weight``
into the compressed-tensors ``pack-quantized`` tensors (``weight_packed``, ``weight_scale``,
``weight_zero_point`` for asymmetric grids, ``weight_shape``) and forgets the states, so host memory stays one
layer. The packing is :func:`toolkit.models.save_quant.packed_tensors`, linear by linear: the state's codes
packed by the compressed-tensors library's packer in the layout its pack-quantized compressor gives the
in-memory export (the tests compare the two checkpoints tensor by tensor), with no float copy of the weight
and no progress bar per linear. At the end :meth:`LayerPacker.write_config` adds the ``quantization_config`` that
:func:`toolkit.models.save_quant.save_quantized` writes for the same linears (built by the library from the
model's schemes, on the meta device), so the folder is the checkpoint an in-memory ``--save-model`` run writes.

The reading side: :func:`packed_config` tells whether a folder is such a checkpoint, and
:func:`load_packed` dequantizes one layer's packed linears from the shards (by the compressed-tensors library,
:func:`toolkit.models.quant_checkpoint.dequantize_state`) into their ``weight`` parameters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from toolkit.errors import ToolkitError
from toolkit.methods.quant_grid import QuantState
from toolkit.models.packed import PACKED, dequantize_state
from toolkit.models.quant_checkpoint import SPARSE_NOTE, LinearKey, StateCollector
from toolkit.models.save_quant import (
    FORMAT,
    GridShape,
    check_states,
    checkpoint_sizes,
    packed_scale,
    packed_tensors,
    packed_words,
    write_quant_config,
)
from toolkit.models.sources import check_shards
from toolkit.runtime.placement import storage_dtype
from toolkit.runtime.precision import DTYPE_NAMES
from toolkit.spec.compression import QuantSpec

WEIGHT = "weight"


def packed_config(folder: Path) -> dict[str, Any] | None:
    """The ``quantization_config`` of ``folder``'s config.json when it is compressed-tensors pack-quantized, else None.

    Raises :class:`ToolkitError` for any other quantization (a GPTQ, AWQ or bitsandbytes checkpoint), which
    streaming cannot read.
    """
    config = json.loads((folder / "config.json").read_text())
    quant = config.get("quantization_config")
    if not quant:
        return None
    if quant.get("quant_method") != "compressed-tensors" or quant.get("format") != FORMAT:
        kind = quant.get("format") or quant.get("quant_method") or "unknown"
        raise ToolkitError(f"streaming reads float or compressed-tensors {FORMAT} checkpoints; {str(folder)!r} is "
                           f"quantized as {kind}: load it in memory")
    return quant


def streamed_report(folder: Path, model: nn.Module, *, sparse: bool) -> dict[str, Any]:
    """The ``checkpoint`` report of a streamed run's folder: :func:`packed_report`'s, or a float one's.

    A float checkpoint's: ``folder``, ``format`` dense, ``bytes`` of every file, ``dtype`` of the model's weights.
    """
    packed = packed_report(folder, model, sparse=sparse)
    if packed is not None:
        return packed
    dtype = storage_dtype(model)
    return {"folder": str(folder), "format": "dense",
            "bytes": sum(file.stat().st_size for file in folder.rglob("*") if file.is_file()),
            "dtype": DTYPE_NAMES.get(dtype, str(dtype))}


def packed_report(folder: Path, model: nn.Module, *, sparse: bool) -> dict[str, Any] | None:
    """The ``checkpoint`` report of a streamed pack-quantized checkpoint (None for a float one).

    The fields of :func:`toolkit.models.quant_checkpoint.save_run_checkpoint`'s report, measured on the folder;
    ``model`` (on meta or not) gives the linears' sizes; ``sparse``: the run also pruned (adds ``sparse_note``).
    """
    from compressed_tensors import __version__ as ct_version

    quant = packed_config(folder)
    if quant is None:
        return None
    names = sorted({key.removesuffix(f".{PACKED}") for key in check_shards(folder) if key.endswith(f".{PACKED}")})
    weights = sum(model.get_submodule(name).get_parameter(WEIGHT).numel() for name in names)
    sizes = checkpoint_sizes(folder, model, names, weights)
    return sizes | {"folder": str(folder), "format": quant.get("format", FORMAT), "compressed_tensors": ct_version,
                    "per_layer": False} | ({"sparse_note": SPARSE_NOTE} if sparse else {})


def packed_weights(keys: dict[str, str], shards: dict[str, str]) -> dict[str, str]:
    """The entries of ``keys`` (name → checkpoint key) that are a linear's ``weight`` stored packed in ``shards``."""
    return {name: key for name, key in keys.items()
            if key.endswith(f".{WEIGHT}") and key not in shards and f"{key}_packed" in shards}


def load_packed(module: nn.Module, folder: Path, shards: dict[str, str], keys: dict[str, str],
                model: nn.Module, quant: dict[str, Any]) -> None:
    """Dequantize the packed weights named in ``keys`` (name in ``module`` → checkpoint key) into ``module``.

    ``model`` is the whole model (its module names are what ``quant``'s config groups target); each weight
    is dequantized in the dtype its parameter has and swapped into it (a parameter on meta gets the storage).
    """
    from safetensors import safe_open

    params = dict(module.named_parameters())
    for name, key in keys.items():
        linear = key.removesuffix(f".{WEIGHT}")
        local: dict[str, Tensor] = {}
        for part in (k for k in shards if k.startswith(f"{linear}.{WEIGHT}_")):
            with safe_open(str(folder / shards[part]), framework="pt", device="cpu") as handle:
                local[part] = handle.get_tensor(part)
        target = params[name]
        value = dequantize_state(local, model, quant, target.dtype)[key]
        if tuple(value.shape) != tuple(target.shape):
            raise ToolkitError(f"packed {linear} in {str(folder)!r} has shape {tuple(value.shape)}, the model "
                               f"expects {tuple(target.shape)}; the checkpoint does not match its config.json")
        if target.device.type == "meta":
            torch.utils.swap_tensors(target, nn.Parameter(value, requires_grad=target.requires_grad))
        else:
            with torch.no_grad():
                target.copy_(value)


def pack_linear(name: str, weight: Tensor, state: QuantState) -> dict[str, Tensor]:
    """The pack-quantized tensors (checkpoint key → CPU tensor) of linear ``name`` quantized as ``state``.

    ``weight`` is the linear's float weight as the layer holds it; only its dtype is used: the scales are stored
    in it, as :func:`toolkit.models.save_quant.save_quantized` stores them for a model in that dtype (the
    values come from ``state``, whose dequantization the layer holds). The tensors are
    :func:`toolkit.models.save_quant.packed_tensors`: the state's codes packed by the library's packer, the
    layout of its pack-quantized compressor, with no float copy of the weight.
    """
    return {f"{name}.{key}": tensor for key, tensor in packed_tensors(state, weight.dtype).items()}


@dataclass(frozen=True)
class PackedLinear:
    """A linear's quantization state once its codes are packed: what writing its layer still needs."""

    spec: QuantSpec
    shape: tuple[int, int]
    scales: Tensor  # (out, groups) float32; stored in the layer's dtype when the layer is written
    words: dict[str, Tensor]  # packed_words: weight_packed, weight_shape, weight_zero_point (asymmetric grids)

    def tensors(self, name: str, dtype: torch.dtype) -> dict[str, Tensor]:
        """The linear's pack-quantized tensors under ``name``, scales in ``dtype``: :func:`pack_linear`'s."""
        tensors = self.words | {"weight_scale": packed_scale(self.scales, self.shape, dtype)}
        return {f"{name}.{key}": tensor for key, tensor in tensors.items()}


@dataclass
class PackingCollector(StateCollector):
    """A :class:`StateCollector` that packs each state as it arrives (masked first, as the in-memory export's).

    A layer's codes then wait for the layer's write as int32 words (b/8 bytes a weight; 4 bits: half the
    uint8 codes) and its keep-masks are dropped at once: ``states`` and ``keeps`` stay empty, ``packed``
    holds the layer's linears.
    """

    packed: dict[LinearKey, PackedLinear] = field(default_factory=dict)
    pruned: bool = False

    def quant(self, layer: int, name: str, state: QuantState) -> None:
        """Mask the state with its keep-mask (given first), pack it, forget the codes and the mask."""
        super().quant(layer, name, state)
        masked = self.states.pop((layer, name))
        self.pruned |= self.keeps.pop((layer, name), None) is not None
        check_states({name: masked}, {name: masked.shape})  # AWQ states and partial groups: refused here
        self.packed[(layer, name)] = PackedLinear(masked.spec, masked.shape, masked.scales.cpu(),
                                                  packed_words(masked))

    @property
    def sparse(self) -> bool:
        """True when some quantized linear was also pruned."""
        return self.pruned or bool(self.keeps)


@dataclass
class LayerPacker:
    """Packs each written decoder layer's quantized linears; remembers only their grids for the config."""

    names: dict[tuple[int, str], str]  # (layer, linear) → qualified name (quant_checkpoint.qualified_names)
    collector: PackingCollector = field(default_factory=PackingCollector)
    grids: dict[str, GridShape] = field(default_factory=dict)

    def pack(self, index: int, tensors: dict[str, Tensor]) -> dict[str, Tensor]:
        """Layer ``index``'s tensors with its quantized linears' weights replaced by their packed tensors.

        The layer's packed states are dropped from the collector once written into the tensors.
        """
        held = self.collector.packed
        linears = {self.names[key]: held.pop(key) for key in list(held) if key[0] == index}
        check_states({name: GridShape(linear.spec, linear.shape) for name, linear in linears.items()},
                     {name: tuple(tensors[f"{name}.{WEIGHT}"].shape) for name in linears})
        packed = dict(tensors)
        for name, linear in linears.items():
            packed.update(linear.tensors(name, packed.pop(f"{name}.{WEIGHT}").dtype))
            self.grids[name] = GridShape(linear.spec, linear.shape)
        return packed

    def write_config(self, model: nn.Module, folder: Path) -> None:
        """Add the ``quantization_config`` of every packed linear to ``folder``'s config.json.

        :func:`toolkit.models.save_quant.write_quant_config`: the library's config from the schemes applied to
        a meta-device copy of ``model``'s linears, as the in-memory save writes it.
        """
        write_quant_config(model, self.grids, folder)


__all__ = ["LayerPacker", "PackedLinear", "PackingCollector", "load_packed", "pack_linear", "packed_config",
           "packed_report", "packed_weights", "streamed_report"]
