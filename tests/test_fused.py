"""The fused engine pass (sequential=group in one forward per layer) and the statistics it builds."""

from __future__ import annotations

import math

import pytest
import torch

from toolkit.data import CalibSpec, calibration_windows
from toolkit.engine import EngineConfig, prune_layers
from toolkit.errors import ToolkitError
from toolkit.events import LayerDone, SublayerPruned
from toolkit.methods import get_method
from toolkit.models import TINY_FAMILIES, decoder_layers, get_weight, layer_linears, load_model
from toolkit.sparsity import NM, Unstructured, drop_lowest
from toolkit.stats import GroupStats, add_gram_upper_, symmetrize


def _windows(num: int = 4, seq: int = 32) -> torch.Tensor:
    tokens = torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(1))
    return calibration_windows(tokens, CalibSpec("x", num, seq, 0))


def _prune(family: str, method: str, target: object, **engine: object) -> tuple[list[torch.Tensor], list]:
    model = load_model(f"tiny-{family}").model
    spec = get_method(method)
    events: list = []
    prune_layers(model, _windows(), spec, target, spec.make_config(), emit=events.append,
                 cfg=EngineConfig(batch_size=2, sequential="group", **engine))
    weights = [get_weight(m).clone() for layer in decoder_layers(model) for m in layer_linears(layer).values()]
    return weights, events


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize("method", ["sparsegpt", "fista"])
def test_fused_pass_equals_the_multi_pass_group_order(family: str, method: str) -> None:
    target = NM(2, 4) if method == "sparsegpt" else Unstructured(0.5)
    fused, fused_events = _prune(family, method, target, fused="on", error_windows=99)
    plain, plain_events = _prune(family, method, target, fused="off")
    for a, b in zip(fused, plain, strict=True):
        assert torch.equal(a == 0, b == 0)
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
    errors = [[e.rel_error for e in ev if isinstance(e, SublayerPruned)] for ev in (fused_events, plain_events)]
    assert errors[0] == pytest.approx(errors[1], rel=1e-3, abs=1e-6)
    outputs = [[e.output_rel_error for e in ev if isinstance(e, LayerDone)] for ev in (fused_events, plain_events)]
    assert outputs[0] == pytest.approx(outputs[1], rel=1e-3, abs=1e-6)


def test_fused_on_with_layer_order_is_refused() -> None:
    with pytest.raises(ToolkitError, match="sequential=group"):
        prune_layers(load_model("tiny-llama").model, _windows(), get_method("wanda"), Unstructured(0.5), None,
                     cfg=EngineConfig(fused="on", sequential="layer"), emit=lambda e: None)


def test_fused_auto_falls_back_when_the_budget_is_too_small() -> None:
    weights, events = _prune("llama", "wanda", Unstructured(0.5), fused="auto", fused_budget_mb=0)
    reference, _ = _prune("llama", "wanda", Unstructured(0.5), fused="on")
    assert all(torch.equal(a == 0, b == 0) for a, b in zip(weights, reference, strict=True))


def test_wanda_reports_errors_from_a_sampled_gram_but_prunes_on_every_token() -> None:
    _, sampled = _prune("llama", "wanda", Unstructured(0.5), fused="on", error_windows=1)
    full_weights, full = _prune("llama", "wanda", Unstructured(0.5), fused="on", error_windows=4)
    sampled_weights, _ = _prune("llama", "wanda", Unstructured(0.5), fused="on", error_windows=1)
    assert all(torch.equal(a, b) for a, b in zip(sampled_weights, full_weights, strict=True))  # same masks
    e1 = [e.rel_error for e in sampled if isinstance(e, SublayerPruned)]
    e4 = [e.rel_error for e in full if isinstance(e, SublayerPruned)]
    assert e1 != pytest.approx(e4, rel=1e-6) and all(0 < e < 1.5 for e in e1)


def test_upper_panel_gram_equals_xtx() -> None:
    x = torch.randn(300, 450, dtype=torch.float64)
    G = torch.zeros(450, 450, dtype=torch.float64)
    add_gram_upper_(G, x, panel=100)
    add_gram_upper_(G, x[:7], panel=100)
    torch.testing.assert_close(symmetrize(G), x.T @ x + x[:7].T @ x[:7])


def test_group_stats_sampled_gram_keeps_full_column_norms() -> None:
    x = torch.randn(2, 50, 8)
    acc = GroupStats(8, torch.device("cpu"), cross=False, gram_limit=30)
    acc.add(x[0])
    acc.add(x[1])
    stats = acc.finish("test")
    flat = x.reshape(-1, 8)
    torch.testing.assert_close(stats.col_sq_norms, flat.pow(2).mean(0))
    torch.testing.assert_close(stats.gram, flat[:30].T @ flat[:30] / 30)
    assert stats.count == 100 and stats.gram_count == 30
    with pytest.raises(ValueError):
        GroupStats(8, torch.device("cpu"), cross=True, gram_limit=30)


@pytest.mark.parametrize("count", [0, 1, 3, 5, 8])
def test_drop_lowest_is_exact_with_ties(count: int) -> None:
    scores = torch.tensor([[3.0, 1.0, 1.0, 1.0, 2.0, 1.0, 5.0, 0.5], [1.0] * 8])
    drop = drop_lowest(scores, count)
    assert drop.sum(1).tolist() == [count, count]
    if 0 < count < 8:  # every dropped score ≤ every kept score in each row
        for row, mask in zip(scores, drop, strict=True):
            assert float(row[mask].max()) <= float(row[~mask].min()) + 0.0
    assert not math.isnan(float(scores.sum()))


def test_memory_settings_apply_once_on_linux() -> None:
    import sys

    from toolkit.memory import keep_freed_memory

    assert keep_freed_memory() is sys.platform.startswith("linux")
    assert keep_freed_memory() is sys.platform.startswith("linux")  # idempotent
