"""Save a model whose linears were quantized as a compressed-tensors ``pack-quantized`` checkpoint.

``AutoModelForCausalLM.from_pretrained(folder)`` loads the result back (transformers' compressed-
tensors integration; needs the ``compressed-tensors`` package, pinned in requirements.txt), except
for a per-layer shrunk model: its folder also holds the structure file of
:mod:`toolkit.models.shrunk` and loads back with ``toolkit.load_model`` only.

Format (written by the compressed-tensors library, never by hand): per quantized linear
``weight_packed`` (int32, 32/b codes per word, dense bit packing), ``weight_scale`` (out, groups)
in the model dtype, ``weight_zero_point`` (packed along the rows; asymmetric grids only) and
``weight_shape``; ``config.json`` gains a ``quantization_config`` with one config group per grid
(``strategy: group``, or ``channel`` for one group per row), targeting the linears by exact name.
compressed-tensors codes are signed: code q of :mod:`toolkit.methods.quant_grid` is stored as q − 2^(b−1) with
zero point z − 2^(b−1), which dequantizes to the same (q − z)·s. Our codes are packed as they are
(the library's ``pack_to_int32``), not re-derived by rounding the weight, so the checkpoint holds
exactly the state's grid values and reload is exact up to the model dtype of the scales.

Pruned weights (joint results) are stored as their group's zero-point code, which dequantizes to
exactly 0; the format has no separate sparsity mask, so the mask costs nothing here and saves
nothing either. AWQ states (:class:`~toolkit.methods.awq.ScaledQuantState`) are refused: their
effective weight dequantize(state)/s needs 1/s folded into the preceding op, which this exporter
does not do (see :mod:`toolkit.methods.awq`).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any, Literal, NamedTuple, cast

import torch
from torch import Tensor, nn

from toolkit.errors import ToolkitError
from toolkit.methods.chunks import row_chunks
from toolkit.methods.quant_grid import QuantState, dequantize
from toolkit.models.save import save_checkpoint
from toolkit.models.shrunk import mark_per_layer, structure_record
from toolkit.models.tokenizers import TextCodec
from toolkit.spec.compression import QuantSpec

FORMAT = "pack-quantized"


class GridShape(NamedTuple):
    """What the config of a quantized linear needs: its grid and its (out, in) shape (a QuantState has both)."""

    spec: QuantSpec
    shape: tuple[int, int]


def pack_codes(codes: Tensor, bits: int, packed_dim: Literal[0, 1] = 1) -> Tensor:
    """Unsigned codes in [0, 2^bits) → compressed-tensors int32 words (signed offset applied).

    Packed along the rows (``packed_dim`` 1, a weight's codes) it goes row chunk by row chunk, so the
    library's int32 temporaries are one chunk's (each row packs alone: the words are the same).
    """
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    if packed_dim == 0:  # zero points: one row per group, small
        return pack_to_int32(_signed(codes, bits), bits, packed_dim=0)
    rows, columns = codes.shape
    out = torch.empty((rows, math.ceil(columns / (32 // bits))), dtype=torch.int32, device=codes.device)
    for chunk in row_chunks(rows, columns):
        out[chunk] = pack_to_int32(_signed(codes[chunk], bits), bits)
    return out


def _signed(codes: Tensor, bits: int) -> Tensor:
    """Codes q in [0, 2^bits) as the library's signed int8 q − 2^(bits−1)."""
    return (codes.to(torch.int32) - (1 << (bits - 1))).to(torch.int8)


def unpack_codes(packed: Tensor, bits: int, shape: tuple[int, int], packed_dim: Literal[0, 1] = 1) -> Tensor:
    """Inverse of :func:`pack_codes`: (shape) uint8 codes in [0, 2^bits) (row chunk by row chunk along the rows)."""
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32

    def unsigned(words: Tensor, rows: int) -> Tensor:
        signed = unpack_from_int32(words, bits, torch.Size((rows, shape[1])), packed_dim=packed_dim)
        return (signed.to(torch.int32) + (1 << (bits - 1))).to(torch.uint8)

    if packed_dim == 0:
        return unsigned(packed, shape[0])
    out = torch.empty(shape, dtype=torch.uint8, device=packed.device)
    for chunk in row_chunks(*shape):
        out[chunk] = unsigned(packed[chunk], out[chunk].shape[0])
    return out


def packed_tensors(state: QuantState, dtype: torch.dtype) -> dict[str, Tensor]:
    """One linear's pack-quantized tensors (names local to the linear) from its state, scales in ``dtype``.

    The layout the library's pack-quantized compressor gives a linear whose grid :func:`load_grid` loaded
    and whose codes :func:`store_codes` replaced (what :func:`save_quantized` writes): ``weight_packed``
    (int32), ``weight_scale`` (out, groups) in ``dtype``, ``weight_shape`` (int64) and, for an asymmetric
    grid, ``weight_zero_point`` packed along the rows; built from the state's codes alone, so no float copy
    of the weight is made. :func:`packed_words` and :func:`packed_scale` are its two halves.
    """
    return packed_words(state) | {"weight_scale": packed_scale(state.scales, state.shape, dtype)}


def packed_words(state: QuantState) -> dict[str, Tensor]:
    """The integer half of :func:`packed_tensors`: ``weight_packed``, ``weight_shape``, ``weight_zero_point``.

    The codes' pack/unpack round trip is checked.
    """
    bits = state.spec.bits
    codes = state.codes.cpu()
    out = {"weight_packed": pack_codes(codes, bits), "weight_shape": torch.tensor(state.shape, dtype=torch.int64)}
    if not state.spec.symmetric:
        out["weight_zero_point"] = pack_codes(state.zeros.round().to(torch.uint8).cpu(), bits,
                                              packed_dim=0).contiguous()
    back = unpack_codes(out["weight_packed"], bits, state.shape)
    assert torch.equal(back, codes), "pack/unpack round trip of the codes failed"
    return out


def packed_scale(scales: Tensor, shape: tuple[int, int], dtype: torch.dtype) -> Tensor:
    """``weight_scale``: a state's scales (out, groups) in ``dtype`` (the model's), as the library stores them."""
    return scales.cpu().reshape(shape[0], -1).to(dtype)


def _check(model: nn.Module, states: dict[str, QuantState]) -> None:
    """ToolkitError for anything the format cannot hold exactly."""
    if not states:
        raise ToolkitError("nothing to export: no quantized linears were given")
    for name in states:
        module = model.get_submodule(name)
        if not isinstance(module, nn.Linear):
            raise ToolkitError(f"{name} is a {type(module).__name__}; pack-quantized export supports nn.Linear only")
    check_states(states, {name: tuple(_tensor(model.get_submodule(name), "weight").shape) for name in states})


def check_states(states: dict[str, QuantState] | dict[str, GridShape], shapes: dict[str, tuple[int, ...]]) -> None:
    """ToolkitError for a state the format cannot hold: AWQ's, another shape than the weight's, partial groups."""
    for name, state in states.items():
        if hasattr(state, "input_scale"):
            raise ToolkitError(f"{name} holds an AWQ state whose per-input scale must be folded into the preceding "
                               "op; pack-quantized cannot store it: export rtn, gptq or awp results")
        if shapes[name] != state.shape:
            raise ToolkitError(f"{name}: state shape {state.shape} differs from the weight {shapes[name]}")
        group = state.spec.group_size
        if group and group < state.shape[1] and state.shape[1] % group:
            raise ToolkitError(f"{name}: group size {group} does not divide its {state.shape[1]} inputs; "
                               "compressed-tensors needs whole groups (use a divisor or g0)")


def grid_config(states: dict[str, QuantState] | dict[str, GridShape]) -> Any:  # a compressed_tensors QuantizationConfig
    """One config group per distinct grid, targeting the linears by exact name."""
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
        QuantizationStatus,
        QuantizationStrategy,
        QuantizationType,
    )

    groups: dict[tuple, list[str]] = {}
    for name, state in states.items():
        spec = state.spec
        per_row = spec.group_size == 0 or spec.group_size >= state.shape[1]
        key = (spec.bits, spec.symmetric, None if per_row else spec.group_size)
        groups.setdefault(key, []).append(name)
    schemes = {}
    for i, ((bits, symmetric, group), names) in enumerate(groups.items()):
        strategy = QuantizationStrategy.CHANNEL if group is None else QuantizationStrategy.GROUP
        args = QuantizationArgs(num_bits=bits, type=QuantizationType.INT, symmetric=symmetric, strategy=strategy,
                                group_size=group)
        schemes[f"group_{i}"] = QuantizationScheme(targets=names, weights=args)
    return QuantizationConfig(config_groups=schemes, quantization_status=QuantizationStatus.FROZEN)


def _tensor(module: nn.Module, name: str) -> Tensor:
    """``module.<name>``, a tensor (torch types a module attribute as Tensor | Module)."""
    return cast(Tensor, getattr(module, name))


def load_grid(module: nn.Module, state: QuantState) -> None:
    """Write the state's scales (and signed zero points) into the module's qparams and its weight."""
    offset = 1 << (state.spec.bits - 1)
    weight, scale = _tensor(module, "weight"), _tensor(module, "weight_scale")
    weight.data.copy_(dequantize(state).to(weight.dtype))
    scale.data.copy_(state.scales.reshape(scale.shape))
    if hasattr(module, "weight_zero_point"):
        zero_point = _tensor(module, "weight_zero_point")
        zeros = (state.zeros.round() - offset).reshape(zero_point.shape)
        zero_point.data.copy_(zeros.to(zero_point.dtype))


def store_codes(module: nn.Module, state: QuantState) -> None:
    """Replace the packed tensors the compressor derived by the state's own codes, and check them."""
    bits = state.spec.bits
    packed = _tensor(module, "weight_packed")
    packed.data = pack_codes(state.codes.cpu(), bits).to(packed.device)
    if not state.spec.symmetric and hasattr(module, "weight_zero_point"):
        zero_point = _tensor(module, "weight_zero_point")
        zeros = state.zeros.round().to(torch.uint8).cpu()
        zero_point.data = pack_codes(zeros, bits, packed_dim=0).to(zero_point.device)
    back = unpack_codes(packed.data.cpu(), bits, state.shape)
    assert torch.equal(back, state.codes.cpu()), "pack/unpack round trip of the codes failed"


def compress_linears(compressor: Any, model: nn.Module, names: list[str]) -> None:
    """``compressor.compress_model(model)`` for the quantized linears ``names``, without its progress bar.

    The library's own per-module step (``compress_module`` in the compressor's format), then the config's
    status set to compressed, as ``compress_model`` does; the decompress-on-forward hook it adds is left out
    (the copy is only saved).
    """
    from compressed_tensors.compressors.base import compress_module
    from compressed_tensors.quantization import QuantizationStatus

    for name in names:
        compress_module(model.get_submodule(name), compressor.force_compression_format)
    if compressor.quantization_config is not None:
        compressor.quantization_config.quantization_status = QuantizationStatus.COMPRESSED


def checkpoint_sizes(folder: Path, model: nn.Module, names: list[str], weights: int) -> dict[str, Any]:
    """Bytes on disk, bytes of the quantized linears ``names`` (codes, scales, zeros, shapes), bits per weight.

    ``weights``: how many weights the quantized linears hold; ``model`` may be on the meta device.
    """
    from safetensors import safe_open

    quantized = 0
    prefixes = tuple(f"{name}." for name in names)
    for path in folder.glob("*.safetensors"):
        with safe_open(path, "pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                if key.startswith(prefixes):
                    tensor = f.get_slice(key)
                    itemsize = torch.empty(0, dtype=_dtype(tensor.get_dtype())).element_size()
                    quantized += math.prod(tensor.get_shape()) * itemsize
    dense_bf16 = 2 * sum(p.numel() for p in model.parameters())
    total = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    tensors = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    return {"bytes": total, "safetensors_bytes": tensors, "quantized_linears": len(names),
            "quantized_weights": weights, "quantized_bytes": quantized,
            "bits_per_weight": 8 * quantized / weights, "dense_bf16_bytes": dense_bf16,
            "size_vs_dense_bf16": tensors / dense_bf16}


def _dtype(name: str) -> torch.dtype:
    """Safetensors dtype string → torch dtype."""
    table = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32,
             "I64": torch.int64, "I8": torch.int8, "U8": torch.uint8, "F64": torch.float64}
    return table[name]


def _copy_without(model: nn.Module, names: list[str]) -> nn.Module:
    """A deep copy of ``model`` in which the ``weight`` of each linear in ``names`` is a meta-device placeholder.

    Those weights are replaced by their packed tensors anyway, so they are not copied (on a 7B layer they are
    the bulk of it).
    """
    memo: dict[int, Any] = {}
    for name in names:
        weight = _tensor(model.get_submodule(name), "weight")
        memo[id(weight)] = nn.Parameter(torch.empty(weight.shape, dtype=weight.dtype, device="meta"),
                                        requires_grad=False)
    return copy.deepcopy(model, memo)


def _swap_packed(module: nn.Module, tensors: dict[str, Tensor]) -> None:
    """Replace ``module.weight`` by the pack-quantized ``tensors`` (local names), as the library's compressor does."""
    del module.weight
    for key, tensor in tensors.items():
        module.register_parameter(key, nn.Parameter(tensor, requires_grad=False))


def write_quant_config(model: nn.Module, grids: dict[str, GridShape], folder: Path,
                       dtype: torch.dtype | None = None) -> None:
    """Add the ``quantization_config`` of the linears in ``grids`` to ``folder``'s config.json.

    The config is the library's, from the schemes applied to a meta-device copy of ``model``'s linears (the
    unquantized ones, such as ``lm_head``, are its ``ignore`` list, in ``dtype`` or their own), with the status
    ``compressed``.
    """
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationStatus, apply_quantization_config

    if not grids:
        raise ToolkitError("nothing to export: no quantized linears were given")
    root = nn.Module()
    for name, module in model.named_modules():  # every linear, in order: the others make the ignore list
        if isinstance(module, nn.Linear):
            linear = nn.Linear(module.in_features, module.out_features, bias=False, device="meta",
                               dtype=dtype or module.weight.dtype)
            _graft(root, name, linear)
    apply_quantization_config(root, grid_config(grids))
    compressor = ModelCompressor.from_pretrained_model(root, quantization_format=FORMAT)
    if compressor.quantization_config is not None:
        compressor.quantization_config.quantization_status = QuantizationStatus.COMPRESSED
    compressor.update_config(str(folder))


def _graft(root: nn.Module, name: str, linear: nn.Module) -> None:
    """Put ``linear`` under ``root`` at the qualified ``name``, creating the modules on its path."""
    parent = root
    *path, last = name.split(".")
    for part in path:
        if not hasattr(parent, part):
            parent.add_module(part, nn.Module())
        parent = parent.get_submodule(part)
    parent.add_module(last, linear)


def save_quantized(model: nn.Module, codec: TextCodec, folder: str | Path, states: dict[str, QuantState],
                   *, dtype: torch.dtype | None = None) -> dict[str, Any]:
    """Write ``model`` with the linears named in ``states`` packed as compressed-tensors pack-quantized.

    ``states`` maps qualified linear names (``model.named_modules()``) to their QuantState; the
    other parameters are saved as they are, in ``dtype`` (default: the model's). Works on a copy whose
    quantized linears get their :func:`packed_tensors` instead of a copy of their weight (no float copy of
    them, no library compression pass): ``model`` is not modified. A model whose config does not describe
    its shapes (per-layer shrunk) also gets the structure file of :mod:`toolkit.models.shrunk`, and loads back only with
    ``toolkit.load_model``. Writes under a ``.partial`` name, renamed at the end and removed on failure.
    Returns sizes: ``bytes`` on disk, ``quantized_bytes`` and ``bits_per_weight`` of the quantized
    linears (codes + scales + zero points + shapes), and the dense bf16 size of the whole model.
    Raises ToolkitError for AWQ states, non-Linear modules or groups that do not divide the width.
    """
    from compressed_tensors import __version__ as ct_version

    _check(model, states)
    work = _copy_without(model, list(states))
    if dtype is not None:
        work = work.to(dtype)
    grids = {name: GridShape(state.spec, state.shape) for name, state in states.items()}
    for name, state in states.items():
        _swap_packed(work.get_submodule(name), packed_tensors(state, _tensor(work.get_submodule(name), "weight").dtype))
    record = structure_record(model)  # the shapes of the model, not of its compressed copy

    def finish(partial: Path) -> None:
        write_quant_config(model, grids, partial, dtype)
        if record is not None:
            mark_per_layer(partial, record)

    folder = save_checkpoint(work, codec, folder, finish=finish)
    sizes = checkpoint_sizes(folder, model, list(states), sum(state.codes.numel() for state in states.values()))
    config = json.loads((folder / "config.json").read_text())["quantization_config"]
    return sizes | {"folder": str(folder), "format": config.get("format", FORMAT), "compressed_tensors": ct_version,
                    "per_layer": record is not None}
