"""compressed-tensors pack-quantized export: exact reload of tiny-llama, code packing, sizes, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from toolkit.errors import ToolkitError
from toolkit.methods import awp, awq
from toolkit.methods.base import LinearStats, SolveContext
from toolkit.methods.quant_grid import bits_per_weight, dequantize, quantize
from toolkit.models.layers import decoder_layers, layer_linears
from toolkit.models.load import load_model
from toolkit.models.save_quant import pack_codes, save_quantized, unpack_codes
from toolkit.spec.compression import QuantSpec
from toolkit.spec.targets import Unstructured

pytest.importorskip("compressed_tensors")


def decoder_linears(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    prefix = {id(layer): name for name, layer in model.named_modules()}
    return {f"{prefix[id(layer)]}.{name}": module
            for layer in decoder_layers(model) for name, module in layer_linears(layer).items()}


def fake_quantize_(model: torch.nn.Module, spec: QuantSpec, target: Unstructured | None = None) -> dict:
    """Quantize every decoder linear in place (RTN, or AWP joint when ``target``); return the states."""
    states = {}
    for name, module in decoder_linears(model).items():
        W = module.weight.data.float()
        if target is None:
            state = quantize(W, spec)
        else:
            stats = LinearStats(torch.eye(W.shape[1]), 1)
            state = awp.prune(W, stats, target, awp.AWPConfig(joint_iters=2, hold_iters=1, ramp_iters=1),
                              SolveContext(quant=spec)).quant
        module.weight.data = dequantize(state)
        states[name] = state
    return states


def reload_logits(folder: Path, ids: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    with torch.no_grad():
        return AutoModelForCausalLM.from_pretrained(folder)(ids).logits


@pytest.mark.parametrize("spec", (QuantSpec(4, 32), QuantSpec(4, 32, symmetric=True), QuantSpec(3, 64),
                                  QuantSpec(8, 0), QuantSpec(2, 32)), ids=str)
def test_reload_gives_the_fake_quantized_logits(tmp_path: Path, spec: QuantSpec) -> None:
    loaded = load_model("tiny-llama")
    states = fake_quantize_(loaded.model, spec)
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = loaded.model(ids).logits
    before = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    report = save_quantized(loaded.model, loaded.codec, tmp_path / "q", states)
    assert all(torch.equal(before[k], v) for k, v in loaded.model.state_dict().items())  # not modified
    got = reload_logits(tmp_path / "q", ids)
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-5 * float(expected.abs().max()))
    assert report["format"] == "pack-quantized" and report["quantized_linears"] == 14
    per_word = 32 // spec.bits  # codes per int32 word in the pinned compressed-tensors (rows padded to words)
    bits = 0.0
    for state in states.values():
        out, cols = state.shape
        groups = state.scales.shape[1]
        zero_words = 0 if spec.symmetric else -(-out // per_word) * groups
        bits += 32 * (out * -(-cols // per_word) + out * groups + zero_words)  # codes, fp32 scales, zeros
    assert report["bits_per_weight"] == pytest.approx(bits / report["quantized_weights"], rel=0.01)
    assert report["bits_per_weight"] > bits_per_weight(spec, 64)  # quant.bits_per_weight counts 16-bit scales


def test_joint_sparse_weights_reload_as_exact_zeros(tmp_path: Path) -> None:
    loaded = load_model("tiny-llama")
    states = fake_quantize_(loaded.model, QuantSpec(4, 32), Unstructured(0.5))
    save_quantized(loaded.model, loaded.codec, tmp_path / "j", states)
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "j")
    ids = torch.randint(0, 256, (1, 8))
    reloaded(ids)  # compressed-tensors decompresses on the first forward
    for name, module in decoder_linears(loaded.model).items():
        again = reloaded.get_submodule(name).weight.data
        assert torch.equal(again, module.weight.data)
        assert float((again == 0).float().mean()) >= 0.5


@pytest.mark.parametrize("bits", (2, 3, 4, 8))
def test_pack_unpack_round_trip(bits: int) -> None:
    codes = torch.randint(0, 2**bits, (5, 70), generator=torch.Generator().manual_seed(bits), dtype=torch.uint8)
    packed = pack_codes(codes, bits)
    assert packed.dtype == torch.int32 and packed.shape == (5, -(-70 // (32 // bits)))
    assert torch.equal(unpack_codes(packed, bits, (5, 70)), codes)
    rows = pack_codes(codes, bits, packed_dim=0)
    assert torch.equal(unpack_codes(rows, bits, (5, 70), packed_dim=0), codes)


def test_refuses_what_the_format_cannot_hold(tmp_path: Path) -> None:
    loaded = load_model("tiny-llama")
    name, module = next(iter(decoder_linears(loaded.model).items()))
    W = module.weight.data
    with pytest.raises(ToolkitError, match="does not divide"):
        save_quantized(loaded.model, loaded.codec, tmp_path / "a", {name: quantize(W, QuantSpec(4, 48))})
    scaled = awq.quantize_linear(W, LinearStats(torch.eye(W.shape[1]), 1), None, awq.AWQConfig(),
                                 SolveContext(quant=QuantSpec(4, 32))).quant
    with pytest.raises(ToolkitError, match="AWQ"):
        save_quantized(loaded.model, loaded.codec, tmp_path / "b", {name: scaled})
    gpt2 = load_model("tiny-gpt2")
    conv = next(iter(decoder_linears(gpt2.model)))
    with pytest.raises(ToolkitError, match=r"nn\.Linear"):
        save_quantized(gpt2.model, gpt2.codec, tmp_path / "c", {conv: quantize(torch.randn(192, 64), QuantSpec(4))})
    assert not any(tmp_path.iterdir())


def test_a_per_layer_model_saves_quantized_with_its_structure(tmp_path: Path) -> None:
    from tests.helpers.block_models import prune, tiny
    from toolkit.models.sources import is_shrunk
    from toolkit.models.tokenizers import ByteCodec

    model = tiny("qwen2")
    prune(model, ratio="structured:40%")
    states = fake_quantize_(model, QuantSpec(4, 0))  # one group per row: every width holds it
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(ids).logits
    report = save_quantized(model, ByteCodec(), tmp_path / "q", states)
    assert report["per_layer"] and is_shrunk(tmp_path / "q")
    assert [p.name for p in tmp_path.iterdir()] == ["q"]
    reloaded = load_model(str(tmp_path / "q"))
    assert "per-layer shapes; pack-quantized, dequantized" in reloaded.label
    with torch.no_grad():
        got = reloaded.model(ids).logits
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-5 * float(expected.abs().max()))
    for name, module in decoder_linears(model).items():
        assert torch.equal(reloaded.model.get_submodule(name).weight.data, module.weight.data)
