"""bf16 forward passes with float32 statistics (``forward_dtype="bf16"``), and the fallback without bf16.

The bf16 passes are tested on every CPU: where the CPU has no native bf16 (AVX512-BF16/AMX) the
support check is forced, and autocast runs the same bf16 matmuls emulated (slower, same numbers'
precision), so the path is exercised on AVX2-only machines too.
"""

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
from toolkit.methods.base import LinearStats, SolveContext
from toolkit.models.layers import decoder_layers, get_weight, layer_linears
from toolkit.models.load import load_model
from toolkit.runtime.precision import bf16_supported
from toolkit.spec.targets import Target, Unstructured


def _used_stats(method: str, stats: LinearStats) -> dict[str, torch.Tensor]:
    """The statistics ``method`` reads: wanda the column norms (its Gram is a (0, 0) placeholder) and the
    error sample; sparsegpt the Gram matrix."""
    if method == "wanda":
        assert stats.gram.numel() == 0 and stats.sample is not None  # sampled statistics: no Gram was built
        return {"col_sq_norms": stats.col_sq_norms, "sample": stats.sample}
    return {"gram": stats.gram}


def _prune(forward_dtype: str, method: str = "wanda"
           ) -> tuple[list[torch.Tensor], list[dict[str, torch.Tensor]], list[object]]:
    """``method`` 50% on tiny-llama; returns the final weights, the statistics the method read, the events."""
    model = load_model("tiny-llama").model
    spec = get_method(method)
    seen: list[dict[str, torch.Tensor]] = []

    def spy(W: torch.Tensor, stats: LinearStats, target: Target | None, cfg: object, ctx: SolveContext) -> object:
        seen.append({name: t.clone() for name, t in _used_stats(method, stats).items()})
        return spec.fn(W, stats, target, cfg, ctx)

    tokens = torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(2))
    events: list[object] = []
    prune_layers(model, calibration_windows(tokens, CalibSpec("x", 4, 32, 0)), dataclasses.replace(spec, fn=spy),
                 Unstructured(0.5), spec.make_config(), emit=events.append,
                 cfg=EngineConfig(forward_dtype=forward_dtype))
    weights = [get_weight(m).detach().clone() for layer in decoder_layers(model) for m in layer_linears(layer).values()]
    return weights, seen, events


@pytest.fixture
def bf16_cpu(monkeypatch: pytest.MonkeyPatch) -> bool:
    """bf16 passes on this CPU: native where it has AVX512-BF16/AMX, else forced (autocast emulates them)."""
    native = bf16_supported(torch.device("cpu"))
    if not native:
        monkeypatch.setattr("toolkit.runtime.devices.bf16_supported", lambda device: True)
    return native


def _moved(fp32: list[dict[str, torch.Tensor]], bf16: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """Per statistic, the largest relative change ‖b − a‖ / ‖a‖ over the linears."""
    assert len(fp32) == len(bf16) and fp32
    moved: dict[str, float] = {}
    for a, b in zip(fp32, bf16, strict=True):
        for name in a:
            assert a[name].numel() > 0 and float(a[name].norm()) > 0, f"{name} is empty or zero"
            moved[name] = max(moved.get(name, 0.0), float((b[name] - a[name]).norm() / a[name].norm()))
    return moved


@pytest.mark.parametrize("method", ["wanda", "sparsegpt"])
def test_bf16_forward_keeps_float32_statistics_and_the_model_dtype(bf16_cpu: bool, method: str) -> None:
    fp32_weights, fp32_stats, _ = _prune("fp32", method)
    bf16_weights, bf16_stats, events = _prune("bf16", method)
    assert all(t.dtype == torch.float32 for stats in bf16_stats for t in stats.values())
    assert all(w.dtype == torch.float32 for w in bf16_weights)  # the model's dtype, not bf16
    assert not any(isinstance(e, RunWarning) for e in events)
    # the passes did run in bf16: the statistics moved, by about bf16's precision (8 bits of mantissa)
    for name, moved in _moved(fp32_stats, bf16_stats).items():
        assert 1e-4 < moved < 5e-2, (name, moved)
    agree = [float(((a != 0) == (b != 0)).float().mean()) for a, b in zip(fp32_weights, bf16_weights, strict=True)]
    assert min(agree) > 0.97
    if method == "wanda":  # a mask only: kept weights are the model's, not bf16-rounded
        for a, b in zip(fp32_weights, bf16_weights, strict=True):
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
