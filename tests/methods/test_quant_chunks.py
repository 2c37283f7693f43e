"""The row-chunked grid, codes, dequantization and packing give exactly the whole-matrix values.

The full-size passes of :mod:`toolkit.methods.quant_grid` and :mod:`toolkit.models.save_quant` go row chunk by
row chunk (:data:`~toolkit.methods.chunks.ROW_CHUNK_ELEMENTS` entries) so that their temporaries stay small on a
7B linear; here the chunk is made a few rows so every test matrix spans many chunks, and each result is compared
bit for bit with the one-chunk run and with the formulas written out on the whole matrix. The export's tensors
and config, built from the states without the library's compression pass, are compared with what the library
derives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from toolkit.methods import chunks
from toolkit.methods.quant_grid import (
    QuantState,
    codes_on_grid,
    dequantize,
    grid,
    group_width,
    quantize,
    zero_point_codes,
)
from toolkit.models.save_quant import pack_codes, packed_tensors, unpack_codes
from toolkit.spec.compression import parse_quant

SPECS = ["int4:g128", "int3:g16:sym", "int2:g0", "int4:g48", "int8:g32"]


def _weight(rows: int, cols: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    torch.manual_seed(rows + cols)
    W = torch.randn(rows, cols) * 0.02
    W[:2, :20] = 0.5  # constant groups take the widened range
    return W.to(dtype)


def _shape(module: torch.nn.Module) -> tuple[int, int]:
    """(out, in) of a linear."""
    assert isinstance(module, torch.nn.Linear)
    return (module.out_features, module.in_features)


def _whole(W: torch.Tensor, text: str) -> tuple[torch.Tensor, ...]:
    """Codes and dequantized weight by the formulas on the whole matrix (no chunks)."""
    spec = parse_quant(text)
    assert spec is not None
    scales, zeros = grid(W, spec)
    width = group_width(spec, W.shape[1])
    s = scales.repeat_interleave(width, dim=1)[:, : W.shape[1]]
    z = zeros.repeat_interleave(width, dim=1)[:, : W.shape[1]]
    codes = torch.clamp(torch.round(W.float() / s) + z, 0, spec.levels - 1).to(torch.uint8)
    return scales, zeros, codes, (codes.float() - z) * s, z.round().to(torch.uint8)


@pytest.mark.parametrize("text", SPECS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_quantization_is_the_whole_matrix_one(monkeypatch: pytest.MonkeyPatch, text: str,
                                                      dtype: torch.dtype) -> None:
    W = _weight(37, 160, dtype)
    expected = _whole(W, text)  # one chunk: 37 x 160 is far below the default chunk
    monkeypatch.setattr(chunks, "ROW_CHUNK_ELEMENTS", 3 * 160 + 7)  # 3 rows a chunk: 13 chunks, the last short
    spec = parse_quant(text)
    assert spec is not None
    scales, zeros = grid(W, spec)
    codes = codes_on_grid(W, scales, zeros, spec)
    state = QuantState(codes, scales, zeros, spec)
    got = (scales, zeros, codes, dequantize(state), zero_point_codes(state))
    for want, have in zip(expected, got, strict=True):
        assert have.dtype == want.dtype and torch.equal(have, want)
    assert torch.equal(quantize(W, spec).codes, codes)


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_chunked_packing_round_trips_and_equals_one_pass(monkeypatch: pytest.MonkeyPatch, bits: int) -> None:
    torch.manual_seed(bits)
    codes = torch.randint(0, 1 << bits, (29, 96), dtype=torch.uint8)
    whole = pack_codes(codes, bits)
    monkeypatch.setattr(chunks, "ROW_CHUNK_ELEMENTS", 2 * 96)
    packed = pack_codes(codes, bits)
    assert packed.dtype == torch.int32 and torch.equal(packed, whole)
    assert torch.equal(unpack_codes(packed, bits, (29, 96)), codes)


@pytest.mark.parametrize("text", ["int4:g32", "int3:g16:sym"])
def test_packed_tensors_are_the_library_layout(text: str) -> None:
    """packed_tensors holds what the library's compressor gives the same linear (codes, scales, zeros, shape)."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import apply_quantization_config

    from toolkit.models.save_quant import FORMAT, grid_config, load_grid, store_codes

    spec = parse_quant(text)
    assert spec is not None
    state = quantize(_weight(24, 64), spec)
    linear = torch.nn.Linear(64, 24, bias=False, dtype=torch.bfloat16)
    holder = torch.nn.Module()
    holder.add_module("proj", linear)
    apply_quantization_config(holder, grid_config({"proj": state}))
    load_grid(linear, state)
    ModelCompressor.from_pretrained_model(holder, quantization_format=FORMAT).compress_model(holder)
    store_codes(linear, state)
    library = {key: value.detach() for key, value in linear.state_dict().items()}
    ours = packed_tensors(state, torch.bfloat16)
    assert ours.keys() == library.keys()
    for key, value in library.items():
        assert ours[key].dtype == value.dtype and torch.equal(ours[key], value), key


@pytest.mark.parametrize("text", ["int4:g32", "int3:g16:sym", "int8:g0"])
def test_meta_config_is_the_library_config_of_the_model(tmp_path: Path, text: str) -> None:
    """write_quant_config (schemes on meta copies of the linears) writes what the library derives from the model."""
    import copy
    import json

    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationStatus, apply_quantization_config

    from toolkit.models.load import load_model
    from toolkit.models.save_quant import FORMAT, GridShape, grid_config, write_quant_config

    spec = parse_quant(text)
    assert spec is not None
    model = load_model("tiny-llama").model
    names = [name for name, module in model.named_modules()
             if isinstance(module, torch.nn.Linear) and ".layers." in name][::2]  # some linears, not all
    grids = {name: GridShape(spec, _shape(model.get_submodule(name))) for name in names}
    config: Any = model.config
    for folder in (tmp_path / "library", tmp_path / "meta"):
        config.save_pretrained(folder)
    work = copy.deepcopy(model)
    apply_quantization_config(work, grid_config(grids))
    compressor = ModelCompressor.from_pretrained_model(work, quantization_format=FORMAT)
    assert compressor.quantization_config is not None
    compressor.quantization_config.quantization_status = QuantizationStatus.COMPRESSED
    compressor.update_config(str(tmp_path / "library"))
    write_quant_config(model, grids, tmp_path / "meta")
    library, meta = (json.loads((tmp_path / kind / "config.json").read_text())["quantization_config"]
                     for kind in ("library", "meta"))
    assert meta == library
