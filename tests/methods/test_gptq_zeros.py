"""GPTQ keeps the input's zeros (keep_zeros, toolkit/methods/gptq.py); RTN keeps them by construction.

A 2:4 weight quantized by plain GPTQ loses the pattern: the error feedback writes into the zeros.
With zeros kept, each zero is quantized to exactly 0 and its error spread like SparseGPT's pruned
weights; the result matches an unblocked float64 reference of that joint sweep.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers.stats import correlated_stats
from toolkit.errors import ToolkitError
from toolkit.methods import gptq, rtn
from toolkit.methods.base import SolveContext
from toolkit.methods.quant_grid import grid, zero_point_codes
from toolkit.spec.compression import QuantSpec

SPEC = QuantSpec(4, 32)


def _two_four(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    """A random (rows, cols) weight with the 2 smallest of every 4 consecutive inputs set to 0 (2:4)."""
    W = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed))
    groups = W.reshape(rows, cols // 4, 4)
    drop = groups.abs().argsort(dim=2)[..., :2]
    return groups.scatter(2, drop, 0.0).reshape(rows, cols)


def _solve(W: torch.Tensor, stats: object, spec: QuantSpec = SPEC, **options: object):
    return gptq.quantize_linear(W, stats, None, gptq.SPEC.make_config(options), SolveContext(quant=spec))  # type: ignore[arg-type]


def _broken_groups(W: torch.Tensor) -> int:
    """Groups of four inputs with more than two nonzeros."""
    return int(((W.reshape(W.shape[0], -1, 4) != 0).sum(dim=2) > 2).sum())


def reference_joint(W: torch.Tensor, H: torch.Tensor, zeros: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """Column by column, explicit inverse updates, float64: ŵ = 0 at a zero, Q(w) elsewhere (SparseGPT + GPTQ)."""
    W, H = W.double().clone(), H.double()
    Hinv = torch.linalg.inv(H + 0.01 * torch.diagonal(H).mean() * torch.eye(H.shape[0], dtype=H.dtype))
    out = torch.empty_like(W)
    for q in range(W.shape[1]):
        if q % spec.group_size == 0:
            s, z = grid(W[:, q : q + spec.group_size].float(), QuantSpec(spec.bits, 0, spec.symmetric))
            s, z = s[:, 0].double(), z[:, 0].double()
        rounded = (torch.clamp(torch.round(W[:, q] / s) + z, 0, spec.levels - 1) - z) * s
        out[:, q] = torch.where(zeros[:, q], torch.zeros_like(rounded), rounded)
        err = (W[:, q] - out[:, q]) / Hinv[q, q]
        W[:, q:] -= torch.outer(err, Hinv[q, q:])
        Hinv = Hinv - torch.outer(Hinv[:, q], Hinv[q, :]) / Hinv[q, q]
    return out.float()


def test_plain_gptq_fills_the_zeros_of_a_two_four_weight() -> None:
    W = _two_four(16, 128)
    _, stats = correlated_stats(128, seed=3)
    plain = _solve(W, stats, keep_zeros="off")
    assert _broken_groups(W) == 0 and _broken_groups(plain.weight) > 0  # the defect kept_zeros fixes
    assert bool(plain.keep_mask.all()) and plain.info["kept_zeros"] == 0


@pytest.mark.parametrize("act_order", (False, True))
@pytest.mark.parametrize("spec", (SPEC, QuantSpec(3, 0), QuantSpec(4, 32, symmetric=True)), ids=str)
def test_kept_zeros_stay_exactly_zero(spec: QuantSpec, act_order: bool) -> None:
    W = _two_four(16, 128, seed=1)
    _, stats = correlated_stats(128, seed=4)
    result = _solve(W, stats, spec, act_order=act_order)  # keep_zeros=auto: half the weights are 0
    zeros = W == 0
    assert result.quant is not None
    assert bool((result.weight[zeros] == 0).all()) and _broken_groups(result.weight) == 0
    assert torch.equal(result.quant.codes[zeros], zero_point_codes(result.quant)[zeros])  # the codes too
    assert torch.equal(result.keep_mask, ~zeros) and result.info["kept_zeros"] == int(zeros.sum())


def test_the_joint_sweep_matches_the_unblocked_reference() -> None:
    W = _two_four(6, 64, seed=2)
    _, stats = correlated_stats(64, tokens=600, seed=5)
    result = _solve(W, stats, QuantSpec(3, 16), block_size=32, keep_zeros="on")
    expected = reference_joint(W, stats.gram, W == 0, QuantSpec(3, 16))
    assert torch.allclose(result.weight, expected, atol=1e-4)


def test_a_dense_weight_with_a_few_zeros_runs_the_plain_sweep_bit_for_bit() -> None:
    W = torch.randn(16, 128, generator=torch.Generator().manual_seed(7))
    W[0, :5] = 0.0  # 5 of 2048 weights, under the 1 % of auto
    _, stats = correlated_stats(128, seed=6)
    auto, off = _solve(W, stats), _solve(W, stats, keep_zeros="off")
    assert auto.quant is not None and off.quant is not None
    assert torch.equal(auto.weight, off.weight) and torch.equal(auto.quant.codes, off.quant.codes)
    assert bool(auto.keep_mask.all())
    assert bool((_solve(W, stats, keep_zeros="on").weight[0, :5] == 0).all())  # "on" holds even these


def test_a_bad_keep_zeros_is_refused() -> None:
    with pytest.raises(ToolkitError, match="keep_zeros of gptq must be one of"):
        gptq.SPEC.make_config({"keep_zeros": "yes"})
    with pytest.raises(ToolkitError, match="keep_zeros must be one of auto, on, off"):
        gptq.GPTQConfig(keep_zeros="yes")


@pytest.mark.parametrize("spec", (SPEC, QuantSpec(2, 0), QuantSpec(4, 32, symmetric=True)), ids=str)
def test_rtn_keeps_zeros_exactly(spec: QuantSpec) -> None:
    W = _two_four(16, 128, seed=8)
    _, stats = correlated_stats(128, seed=9)
    result = rtn.quantize_linear(W, stats, None, rtn.SPEC.make_config({}), SolveContext(quant=spec))
    assert bool((result.weight[W == 0] == 0).all()) and _broken_groups(result.weight) == 0
