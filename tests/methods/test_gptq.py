"""GPTQ: identity Hessian = RTN, an unblocked OBS reference, block-size invariance, error order, errors."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.stats import correlated_stats
from toolkit.engine.solve import reconstruction_errors
from toolkit.errors import NumericalError, ToolkitError
from toolkit.methods import get_method, gptq, rtn
from toolkit.methods.base import LinearStats, Produces, SolveContext
from toolkit.methods.quant_grid import dequantize, grid, quantize
from toolkit.spec.compression import QuantSpec
from toolkit.spec.targets import Unstructured

SPECS = (QuantSpec(4, 64), QuantSpec(3, 32), QuantSpec(4, 0), QuantSpec(4, 64, symmetric=True), QuantSpec(2, 100))


def solve(W, stats, spec, **options):
    return gptq.quantize_linear(W, stats, None, gptq.SPEC.make_config(options), SolveContext(quant=spec))


def reference_gptq(W: torch.Tensor, H: torch.Tensor, spec: QuantSpec, damp: float = 0.01) -> torch.Tensor:
    """Column-by-column OBS quantization with explicit inverse updates (GPTQ paper eq. 2-3), float64."""
    W, H = W.double().clone(), H.double()
    Hinv = torch.linalg.inv(H + damp * torch.diagonal(H).mean() * torch.eye(H.shape[0], dtype=H.dtype))
    cols, width = W.shape[1], spec.group_size
    out = torch.empty_like(W)
    for q in range(cols):
        if q % width == 0:
            s, z = grid(W[:, q : q + width].float(), QuantSpec(spec.bits, 0, spec.symmetric))
            s, z = s[:, 0].double(), z[:, 0].double()
        out[:, q] = (torch.clamp(torch.round(W[:, q] / s) + z, 0, spec.levels - 1) - z) * s
        err = (W[:, q] - out[:, q]) / Hinv[q, q]
        W[:, q:] -= torch.outer(err, Hinv[q, q:])
        Hinv = Hinv - torch.outer(Hinv[:, q], Hinv[q, :]) / Hinv[q, q]
    return out.float()


@pytest.mark.parametrize("spec", SPECS, ids=str)
@pytest.mark.parametrize("act_order", (False, True))
def test_identity_hessian_equals_rtn(spec: QuantSpec, act_order: bool) -> None:
    W = torch.randn(32, 200, generator=torch.Generator().manual_seed(0))
    result = solve(W, LinearStats(torch.eye(200), 10), spec, act_order=act_order)
    reference = quantize(W, spec)
    assert torch.equal(result.quant.codes, reference.codes) and torch.equal(result.weight, dequantize(reference))


def test_matches_the_unblocked_obs_reference() -> None:
    _, stats = correlated_stats(48, tokens=500, seed=5)
    W = torch.randn(6, 48, generator=torch.Generator().manual_seed(6))
    spec = QuantSpec(3, 16)
    result = solve(W, stats, spec, block_size=32)
    expected = reference_gptq(W, stats.gram, spec)
    assert torch.allclose(result.weight, expected, atol=1e-4)


def test_block_size_does_not_change_the_result() -> None:
    _, stats = correlated_stats(256, seed=1)
    W = torch.randn(64, 256, generator=torch.Generator().manual_seed(2))
    for spec in (QuantSpec(4, 64), QuantSpec(4, 0)):
        one, many = solve(W, stats, spec, block_size=1), solve(W, stats, spec, block_size=128)
        assert float((one.quant.codes != many.quant.codes).float().mean()) < 1e-3  # float ties only
        assert reconstruction_errors(W, one.weight, stats)[0] == pytest.approx(
            reconstruction_errors(W, many.weight, stats)[0], rel=1e-2)


@pytest.mark.parametrize("spec", SPECS[:4], ids=str)  # int4/int3; at int2 GPTQ may lose to RTN
@pytest.mark.parametrize("act_order", (False, True))
def test_gptq_beats_rtn_on_correlated_inputs(spec: QuantSpec, act_order: bool) -> None:
    _, stats = correlated_stats(256, seed=3)
    W = torch.randn(128, 256, generator=torch.Generator().manual_seed(7))
    before = W.clone()
    result = solve(W, stats, spec, act_order=act_order)
    assert torch.equal(W, before) and torch.equal(result.weight, dequantize(result.quant))
    base = rtn.quantize_linear(W, stats, None, rtn.RTNConfig(), SolveContext(quant=spec)).weight
    assert reconstruction_errors(W, result.weight, stats)[0] < reconstruction_errors(W, base, stats)[0]
    assert bool(result.keep_mask.all()) and result.damping == pytest.approx(0.01)


def test_act_order_uses_static_groups_of_the_original_weight() -> None:
    _, stats = correlated_stats(128, seed=4)
    W = torch.randn(16, 128, generator=torch.Generator().manual_seed(4))
    result = solve(W, stats, QuantSpec(4, 32), act_order=True)
    assert torch.equal(result.quant.scales, quantize(W, QuantSpec(4, 32)).scales)
    assert result.info["groups"] == "static"


def test_dead_inputs_and_errors() -> None:
    W = torch.randn(4, 8)
    gram = torch.diag(torch.tensor([1.0, 0.0, 2.0, 1.0, 0.0, 1.0, 3.0, 1.0]))
    result = solve(W, LinearStats(gram, 10), QuantSpec(4, 8))
    assert torch.isfinite(result.weight).all()
    assert get_method("gptq").produces == frozenset({Produces.QUANT})
    with pytest.raises(ToolkitError, match="only quantizes"):
        gptq.quantize_linear(W, LinearStats(gram, 10), Unstructured(0.5), gptq.GPTQConfig(),
                             SolveContext(quant=QuantSpec(4)))
    with pytest.raises(NumericalError, match="non-finite"):
        solve(W, LinearStats(gram * torch.inf, 10), QuantSpec(4, 8))
    with pytest.raises(ToolkitError, match="block_size"):
        gptq.SPEC.make_config({"block_size": "0"})
