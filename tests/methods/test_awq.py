"""AWQ and the two-stage pipelines: s = 1 is RTN, the Gram-block clipping error, error order, invariants."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.stats import correlated_stats
from toolkit.engine.solve import reconstruction_errors
from toolkit.errors import ToolkitError
from toolkit.methods import awq, get_method, rtn, two_stage, wanda
from toolkit.methods.base import LinearStats, SolveContext
from toolkit.methods.masks import nm_violations
from toolkit.methods.quant_grid import dequantize, quantize, zero_point_codes
from toolkit.spec.compression import QuantSpec
from toolkit.spec.targets import NM, Structured, Unstructured

INT4 = QuantSpec(4, 64)


@pytest.fixture(scope="module")
def problem() -> tuple[torch.Tensor, LinearStats]:
    _, stats = correlated_stats(256, seed=0)
    return torch.randn(128, 256, generator=torch.Generator().manual_seed(100)), stats


def solve(W, stats, spec, name="mlp.up_proj", **options):
    return awq.quantize_linear(W, stats, None, awq.SPEC.make_config(options), SolveContext(name=name, quant=spec))


def error(W, new, stats) -> float:
    return reconstruction_errors(W, new, stats)[0]


@pytest.mark.parametrize("spec", (INT4, QuantSpec(3, 0), QuantSpec(4, 64, symmetric=True)), ids=str)
def test_scale_one_without_clipping_is_rtn(problem, spec) -> None:
    W, stats = problem
    result = solve(W, stats, spec, n_grid=1, clip="off")
    reference = quantize(W, spec)
    assert torch.equal(result.quant.codes, reference.codes) and torch.equal(result.weight, dequantize(reference))
    assert torch.equal(result.quant.input_scale, torch.ones(256)) and result.info["alpha"] == 0.0


def test_weight_is_the_dequantized_scaled_weight_over_the_scale(problem) -> None:
    W, stats = problem
    result = solve(W, stats, INT4)
    s = result.quant.input_scale
    assert torch.equal(result.weight, dequantize(result.quant) / s) and torch.equal(result.weight,
                                                                                  awq.effective_weight(result.quant))
    assert float(s.max() * s.min()) == pytest.approx(1.0, rel=1e-4)  # s / √(max·min), as llm-awq
    assert isinstance(result.quant.to("cpu"), awq.ScaledQuantState)


def test_group_errors_from_gram_blocks_equal_the_partial_outputs() -> None:
    X, stats = correlated_stats(40, tokens=300, seed=2)
    dW = torch.randn(3, 40, generator=torch.Generator().manual_seed(3))
    for width in (8, 16):  # 16 does not divide 40: the last group has 8 inputs
        got = awq.group_errors(dW, awq.group_blocks(stats.gram, width))
        expected = torch.stack([((X[:, g:g + width] @ dW[:, g:g + width].T) ** 2).mean(0)
                                for g in range(0, 40, width)], dim=1)
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bits", (4, 3))
def test_awq_beats_rtn_and_the_search_never_loses(problem, bits) -> None:
    W, stats = problem
    spec = QuantSpec(bits, 64)
    base = error(W, rtn.quantize_linear(W, stats, None, rtn.RTNConfig(), SolveContext(quant=spec)).weight, stats)
    assert error(W, solve(W, stats, spec, clip="off").weight, stats) <= base  # α = 0 is in the grid
    assert error(W, solve(W, stats, spec).weight, stats) < base


def test_clipping_is_skipped_for_query_and_key_projections(problem) -> None:
    W, stats = problem
    assert not solve(W, stats, INT4, name="model.layers.0.self_attn.q_proj").info["clipped"]
    assert solve(W, stats, INT4, name="model.layers.0.self_attn.v_proj").info["clipped"]
    assert solve(W, stats, INT4, name="self_attn.k_proj", clip="on").info["clipped"]


# --- wanda+awq and awq+wanda -----------------------------------------------------------------

@pytest.mark.parametrize("name", ("wanda+awq", "awq+wanda"))
@pytest.mark.parametrize("target", (Unstructured(0.5), NM(2, 4)), ids=str)
def test_two_stage_results_are_sparse_on_grid_and_consistent(problem, name, target) -> None:
    W, stats = problem
    spec = get_method(name)
    result = spec.fn(W, stats, target, spec.make_config({}), SolveContext(name="mlp.up_proj", quant=INT4))
    keep, state = result.keep_mask, result.quant
    if isinstance(target, NM):
        assert nm_violations(keep, target) == 0
    else:
        assert bool((keep.sum(1) == 128).all())
    assert bool((result.weight[~keep] == 0).all())
    assert torch.equal(result.weight, awq.effective_weight(state))
    assert torch.equal(state.codes[~keep], zero_point_codes(state)[~keep])
    first = W if name == "wanda+awq" else awq.effective_weight(awq.awq_state(W, stats, INT4, awq.AWQConfig(),
                                                                             "mlp.up_proj")[0])
    assert torch.equal(keep, wanda.prune(first, stats, target, wanda.WandaConfig(), SolveContext()).keep_mask)


def test_two_stage_errors() -> None:
    W, stats = torch.randn(4, 16), LinearStats(torch.eye(16), 10)
    cfg = two_stage.TwoStageConfig()
    with pytest.raises(ToolkitError, match="prunes and quantizes"):
        two_stage.prune_then_quantize(W, stats, Unstructured(0.5), cfg, SolveContext())
    with pytest.raises(ToolkitError, match="prunes and quantizes"):
        two_stage.quantize_then_prune(W, stats, None, cfg, SolveContext(quant=INT4))
    with pytest.raises(ToolkitError, match="structured"):
        two_stage.prune_then_quantize(W, stats, Structured(0.5), cfg, SolveContext(quant=INT4))
    with pytest.raises(ToolkitError, match="only quantizes"):
        awq.quantize_linear(W, stats, Unstructured(0.5), awq.AWQConfig(), SolveContext(quant=INT4))
