"""bf16 forward passes with float32 statistics (``forward_dtype="bf16"``), and the fallback without bf16."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from toolkit.data.text import CalibSpec, calibration_windows
from toolkit.engine.prune import prune_layers
from toolkit.engine.state import EngineConfig
from toolkit.errors import ToolkitError
from toolkit.events import RunWarning
from toolkit.methods import get_method
from toolkit.models.layers import decoder_layers, get_weight, layer_linears
from toolkit.models.load import load_model
from toolkit.spec.targets import Unstructured


def _prune(forward_dtype: str) -> tuple[list[torch.Tensor], list[torch.Tensor], list[object]]:
    """wanda 50% on tiny-llama; returns the final weights, the Gram matrices the method saw, the events."""
    model = load_model("tiny-llama").model
    spec = get_method("wanda")
    grams: list[torch.Tensor] = []

    def spy(W: torch.Tensor, stats: object, target: object, cfg: object, ctx: object) -> object:
        grams.append(stats.gram)  # type: ignore[attr-defined]
        return spec.fn(W, stats, target, cfg, ctx)

    tokens = torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(2))
    events: list[object] = []
    prune_layers(model, calibration_windows(tokens, CalibSpec("x", 4, 32, 0)), dataclasses.replace(spec, fn=spy),
                 Unstructured(0.5), spec.make_config(), emit=events.append,
                 cfg=EngineConfig(forward_dtype=forward_dtype))
    weights = [get_weight(m).detach().clone() for layer in decoder_layers(model) for m in layer_linears(layer).values()]
    return weights, grams, events


@pytest.mark.skipif(not __import__("toolkit.runtime.precision", fromlist=["x"]).bf16_supported(torch.device("cpu")),
                    reason="this CPU has no bf16 (AVX512-BF16/AMX)")
def test_bf16_forward_keeps_float32_statistics_and_the_model_dtype() -> None:
    fp32_weights, fp32_grams, _ = _prune("fp32")
    bf16_weights, bf16_grams, events = _prune("bf16")
    assert all(g.dtype == torch.float32 for g in bf16_grams)
    assert all(w.dtype == torch.float32 for w in bf16_weights)  # the model's dtype, not bf16
    assert not any(isinstance(e, RunWarning) for e in events)
    # the passes did run in bf16: the statistics moved, by about bf16's precision (8 bits of mantissa)
    moved = [float((b - a).norm() / a.norm()) for a, b in zip(fp32_grams, bf16_grams, strict=True)]
    assert max(moved) > 1e-4 and max(moved) < 5e-2
    agree = [float(((a != 0) == (b != 0)).float().mean()) for a, b in zip(fp32_weights, bf16_weights, strict=True)]
    assert min(agree) > 0.97
    for a, b in zip(fp32_weights, bf16_weights, strict=True):  # kept weights are the model's, not bf16-rounded
        both = (a != 0) & (b != 0)
        assert torch.equal(a[both], b[both])


def test_bf16_without_support_runs_fp32_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("toolkit.runtime.devices.bf16_supported", lambda device: False)
    fp32_weights, _, _ = _prune("fp32")
    weights, _, events = _prune("bf16")
    warnings = [e for e in events if isinstance(e, RunWarning)]
    assert len(warnings) == 1 and "no native bf16" in warnings[0].message
    assert all(torch.equal(a, b) for a, b in zip(fp32_weights, weights, strict=True))


def test_forward_dtype_is_checked() -> None:
    with pytest.raises(ToolkitError, match="forward_dtype must be one of"):
        EngineConfig(forward_dtype="fp16")
