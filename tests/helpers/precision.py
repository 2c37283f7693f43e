"""One compression run on a float32 model and on its bfloat16 copy, and the distances between the two results.

The models are the tiny random decoders of :func:`toolkit.models.load.load_model` with their weights
redrawn at unit gain (std fan_in^-½, biases std 0.1, as :func:`tests.helpers.block_models.tiny` does):
HF's init (std 0.02) makes every layer a near-identity, so pruning would barely change the outputs and
an output check could not tell a good run from a broken one. Calibration windows come from the
embedded Wikipedia text (train split), held-out windows from its test split.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from functools import cache

import torch
from torch import Tensor, nn

from toolkit.data.text import CalibSpec, calibration_windows, eval_windows, load_tokens
from toolkit.engine.prune import prune_layers
from toolkit.engine.state import EngineConfig, EngineResult
from toolkit.methods import get_method
from toolkit.methods.quant_grid import QuantState
from toolkit.models.load import load_model
from toolkit.models.tokenizers import TextCodec
from toolkit.spec.compression import Compression

Key = tuple[int, str]  # (decoder layer, linear name)


def tiny_model(family: str, dtype: torch.dtype, *, bf16_values: bool = False, seed: int = 0) -> nn.Module:
    """``tiny-<family>`` with redrawn weights (module docstring), stored in ``dtype``.

    ``bf16_values`` rounds every weight to the nearest bfloat16 value first (the storage stays ``dtype``),
    so a float32 model and its bfloat16 copy hold exactly the same numbers.
    """
    model = load_model(f"tiny-{family}").model
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 2:
                param.copy_(torch.randn(param.shape, generator=generator) * param.shape[1] ** -0.5)
            elif name.endswith("bias"):
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
        if bf16_values:
            for param in model.parameters():
                param.copy_(param.to(torch.bfloat16).float())
    return model.to(dtype)


@cache
def _byte_tokens(split: str) -> Tensor:
    return load_tokens("wiki", split, load_model("tiny-llama").codec)  # every tiny family shares the byte codec


def _tokens(split: str, codec: TextCodec | None) -> Tensor:
    return _byte_tokens(split) if codec is None else load_tokens("wiki", split, codec)


def calibration(num: int = 8, seq: int = 64, codec: TextCodec | None = None) -> Tensor:
    """(num, seq) calibration windows from the embedded text's train split (``codec``: the tiny models' bytes)."""
    return calibration_windows(_tokens("train", codec), CalibSpec("wiki", num, seq, 0))


def held_out(num: int = 4, seq: int = 64, codec: TextCodec | None = None) -> Tensor:
    """(num, seq) evaluation windows from the test split (never seen by the calibration)."""
    return eval_windows(_tokens("test", codec), seq, num)


@dataclass
class Compressed:
    """What one run gave: the model, the engine's records and what its sinks received."""

    model: nn.Module
    result: EngineResult
    masks: dict[Key, Tensor] = field(default_factory=dict)
    quants: dict[Key, QuantState] = field(default_factory=dict)
    structure: list[dict] = field(default_factory=list)


def compress(model: nn.Module, method: str, compression: Compression, windows: Tensor,
             options: dict | None = None) -> Compressed:
    """Run ``method`` on ``model`` in place on the CPU and keep what the sinks got."""
    spec = get_method(method)
    out = Compressed(model, EngineResult())
    out.result = prune_layers(model, windows, spec, compression, spec.make_config(options or {}),
                              cfg=EngineConfig(device="cpu"), emit=lambda event: None,
                              on_mask=lambda layer, name, keep: out.masks.__setitem__((layer, name), keep.clone()),
                              on_quant=lambda layer, name, state: out.quants.__setitem__((layer, name), state),
                              on_structure=out.structure.append)
    return out


def floating_dtypes(model: nn.Module) -> dict[str, torch.dtype]:
    """The dtype of every floating parameter and buffer, by name."""
    tensors = [*model.named_parameters(), *model.named_buffers()]
    return {name: tensor.dtype for name, tensor in tensors if tensor.is_floating_point()}


def mask_agreement(a: Compressed, b: Compressed) -> dict[Key, float]:
    """Per linear, the fraction of keep-mask entries the two runs agree on."""
    assert a.masks.keys() == b.masks.keys()
    return {key: float((a.masks[key] == b.masks[key]).float().mean()) for key in a.masks}


def pooled_mask_agreement(a: Compressed, b: Compressed) -> float:
    """Over all linears, the fraction of keep-mask entries the two runs agree on."""
    assert a.masks.keys() == b.masks.keys() and a.masks
    same = sum(int((a.masks[key] == b.masks[key]).sum()) for key in a.masks)
    return same / sum(mask.numel() for mask in a.masks.values())


def codes_equal(a: Compressed, b: Compressed) -> float:
    """Over all quantized linears, the fraction of integer codes that are equal."""
    assert a.quants.keys() == b.quants.keys() and a.quants
    same = sum(int((a.quants[k].codes == b.quants[k].codes).sum()) for k in a.quants)
    return same / sum(a.quants[k].codes.numel() for k in a.quants)


def dequantized_gaps(a: Compressed, b: Compressed) -> dict[Key, float]:
    """Per linear, ‖Ŵ_b − Ŵ_a‖_F / ‖Ŵ_a‖_F of the dequantized weights (the states, not the stored copies)."""
    gaps = {}
    for key, state in a.quants.items():
        wa, wb = state.effective_weight(), b.quants[key].effective_weight()
        gaps[key] = float(torch.linalg.norm(wb - wa) / torch.linalg.norm(wa))
    return gaps


def rel_error_gaps(a: Compressed, b: Compressed) -> list[float]:
    """Per linear (pruning order), |rel_error_b − rel_error_a| / rel_error_a of the engine's records."""
    pairs = list(zip(a.result.layers, b.result.layers, strict=True))
    assert all((x["layer"], x["name"]) == (y["layer"], y["name"]) for x, y in pairs)
    return [abs(y["rel_error"] - x["rel_error"]) / x["rel_error"] for x, y in pairs if x["rel_error"] > 0]


def mean_rel_error_gap(a: Compressed, b: Compressed) -> float:
    """|mean rel_error_b − mean rel_error_a| / mean rel_error_a over all linears."""
    ea = sum(x["rel_error"] for x in a.result.layers)
    eb = sum(y["rel_error"] for y in b.result.layers)
    return abs(eb - ea) / ea


def mean_nll(model: nn.Module, windows: Tensor) -> float:
    """Mean next-token NLL on ``windows``, computed in float32 on an upcast copy (``model`` is left as it is)."""
    copy_ = copy.deepcopy(model).float()
    with torch.no_grad():
        logits = copy_(input_ids=windows).logits  # (num, seq, vocab)
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))
    assert math.isfinite(float(nll))
    return float(nll)


def kept_units(run: Compressed) -> list[tuple[set[int], set[int]]]:
    """Per decoder layer, the (query heads, MLP channels) a block-scope run kept."""
    assert len(run.structure) == 1, "one structure change per block-scope run"
    return [(set(r["heads_kept"]), set(r["channels_kept"])) for r in run.structure[0]["layers"]]


def shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """The shape of every parameter, by name."""
    return {name: tuple(p.shape) for name, p in model.named_parameters()}
