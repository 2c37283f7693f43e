"""AWP's quantize mode started from GPTQ's solution (``quant_init=gptq``): a refinement that cannot lose."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

from toolkit.errors import ToolkitError
from toolkit.events import SolverStep
from toolkit.methods import awp, gptq
from toolkit.methods.base import LinearStats, SolveContext
from toolkit.methods.quant_grid import dequantize, quantize
from toolkit.spec.compression import QuantSpec
from toolkit.spec.targets import Unstructured

INT3 = QuantSpec(3, 32)


def loss(W: torch.Tensor, theta: torch.Tensor, stats: LinearStats) -> float:
    """tr((W − Θ) C (W − Θ)ᵀ) in float64."""
    D = (W - theta).double()
    return float(torch.sum((D @ stats.gram.double()) * D))


def context(quant: QuantSpec | None, events: list | None = None) -> SolveContext:
    return SolveContext(layer=0, name="mlp.down_proj", quant=quant,
                        emit=events.append if events is not None else lambda e: None)


@pytest.fixture(scope="module")
def correlated() -> tuple[torch.Tensor, LinearStats]:
    """W (16, 96) and the Gram of rank-8 correlated inputs with uneven scales and two loud channels."""
    gen = torch.Generator().manual_seed(3)
    X = torch.randn(512, 8, generator=gen) @ torch.randn(8, 96, generator=gen) + 0.3 * torch.randn(512, 96,
                                                                                                  generator=gen)
    X = X * torch.exp(0.5 * torch.randn(96, generator=gen))
    X[:, [5, 40]] *= 15
    return torch.randn(16, 96, generator=gen), LinearStats(X.T @ X / 512, 512)


def test_rtn_start_stays_far_above_gptq_on_correlated_inputs(correlated) -> None:
    # the diagnosis: projected steps from RTN cannot reach GPTQ's loss on the same objective
    W, stats = correlated
    g = gptq.quantize_linear(W, stats, None, gptq.GPTQConfig(), context(INT3))
    rtn = loss(W, dequantize(quantize(W, INT3)), stats)
    paper = awp.prune(W, stats, None, awp.AWPConfig(), context(INT3))
    assert loss(W, g.weight, stats) < 0.7 * rtn
    assert loss(W, paper.weight, stats) > 1.2 * loss(W, g.weight, stats)


@pytest.mark.parametrize("step", ["spectral", "backtracking"])
def test_gptq_start_with_nearest_grid_ends_at_or_below_gptq(correlated, step: str) -> None:
    W, stats = correlated
    g = gptq.quantize_linear(W, stats, None, gptq.GPTQConfig(), context(INT3))
    events: list = []
    cfg = awp.AWPConfig(quant_init="gptq", grid_update="nearest", step=step, iterations=30)
    out = awp.prune(W, stats, None, cfg, context(INT3, events))
    assert loss(W, out.weight, stats) <= loss(W, g.weight, stats) * (1 + 1e-5)
    assert out.quant is not None and torch.equal(out.weight, dequantize(out.quant))
    steps = [e.objective for e in events if isinstance(e, SolverStep)]
    assert steps and all(b <= a * (1 + 1e-5) for a, b in itertools.pairwise(steps))  # monotone
    # the first objective is GPTQ's own (the start), not RTN's
    assert steps[0] == pytest.approx(out.info["objective_init"], rel=1e-6)
    assert out.info["objective_init"] ** 2 == pytest.approx(loss(W, g.weight, stats) / loss(W, W * 0, stats),
                                                            rel=1e-3)
    rtn = loss(W, dequantize(quantize(W, INT3)), stats)  # RTN's objective on the same C, for the comparison
    assert out.info["objective_rtn"] ** 2 == pytest.approx(rtn / loss(W, W * 0, stats), rel=1e-4)


def test_codes_changed_count_against_rtn_codes_not_the_start(correlated) -> None:
    W, stats = correlated
    out = awp.prune(W, stats, None, awp.AWPConfig(quant_init="gptq", grid_update="nearest", iterations=2),
                    context(INT3))
    rtn = quantize(W, INT3).codes
    assert out.quant is not None
    expected = float((out.quant.codes != rtn).float().mean())
    assert out.info["codes_changed"] == pytest.approx(expected, abs=1e-9)
    assert out.info["codes_changed"] > 0.05  # GPTQ moved codes off RTN's


def test_default_start_is_still_rtn(correlated) -> None:
    W, stats = correlated
    assert awp.AWPConfig().quant_init == "rtn"
    a = awp.prune(W, stats, None, awp.AWPConfig(), context(INT3))
    assert "objective_rtn" not in a.info  # objective_init is RTN's already
    b = awp.prune(W, stats, None, awp.AWPConfig(quant_init="rtn"), context(INT3))
    assert torch.equal(a.weight, b.weight)


def test_quant_init_with_a_sparsity_is_one_clear_line(correlated) -> None:
    W, stats = correlated
    with pytest.raises(ToolkitError, match="quant_init=gptq starts a quantize-only run"):
        awp.prune(W, stats, Unstructured(0.5), awp.AWPConfig(quant_init="gptq"), context(INT3))


def test_unknown_quant_init_is_refused() -> None:
    with pytest.raises(ToolkitError, match="quant_init must be one of"):
        awp.AWPConfig(quant_init="awq")


def test_run_config_refuses_quant_init_with_a_sparsity_before_the_model_loads() -> None:
    from toolkit.run.config import RunConfig

    run: dict[str, Any] = {"method": "awp", "quant": "int4:g32", "options": {"quant_init": "gptq"}}
    pruning: dict[str, Any] = {"model": "no-such-model-is-loaded", "sparsity": "50%"}
    with pytest.raises(ToolkitError, match="drop quant_init or the sparsity"):
        RunConfig(**run, **pruning)
    RunConfig(model="tiny-llama", sparsity=None, **run)


def test_gptq_start_with_dead_inputs_stays_finite(correlated) -> None:
    W, stats = correlated
    C = stats.gram.clone()
    C[:, :32] = 0  # the first group's inputs are always zero
    C[:32, :] = 0
    out = awp.prune(W, LinearStats(C, stats.count), None,
                    awp.AWPConfig(quant_init="gptq", grid_update="nearest", step="spectral"), context(INT3))
    assert torch.isfinite(out.weight).all() and out.info["objective"] is not None
    assert out.info["objective"] <= out.info["objective_init"] * (1 + 1e-5)


@pytest.mark.parametrize("keep_zeros", ["on", "off"])
def test_gptq_start_holds_the_inputs_zeros_only_as_keep_zeros_says(correlated, keep_zeros: str) -> None:
    # 6 % of W rounded to exactly 0, as a dequantized Q4_K_M source has: the GPTQ start is GPTQ's own at keep_zeros
    W, stats = correlated
    W = W.clone()
    W[torch.rand(W.shape, generator=torch.Generator().manual_seed(1)) < 0.06] = 0.0
    cfg = awp.AWPConfig(quant_init="gptq", keep_zeros=keep_zeros, iterations=1)
    start = gptq.quantize_linear(W, stats, None, gptq.GPTQConfig(keep_zeros=keep_zeros), context(INT3))
    out = awp.prune(W, stats, None, cfg, context(INT3))
    assert out.info["objective_init"] ** 2 == pytest.approx(loss(W, start.weight, stats) / loss(W, W * 0, stats),
                                                            rel=1e-3)
    held = bool((start.weight[W == 0] == 0).all())
    assert held is (keep_zeros == "on")
    with pytest.raises(ToolkitError, match="keep_zeros must be one of"):
        awp.AWPConfig(keep_zeros="maybe")
