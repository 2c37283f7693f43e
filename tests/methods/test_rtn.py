"""RTN: a hand case on the min-max grid, the quant core's state, the contract fields and errors."""

from __future__ import annotations

import pytest
import torch

from toolkit.errors import ToolkitError
from toolkit.methods import get_method, rtn
from toolkit.methods.base import LinearStats, Produces, SolveContext
from toolkit.methods.quant_grid import dequantize, quantize
from toolkit.spec.compression import Compression, QuantSpec
from toolkit.spec.targets import Unstructured


def solve(W: torch.Tensor, spec: QuantSpec | None, target: object = None):
    return rtn.quantize_linear(W, LinearStats(torch.eye(W.shape[1]), 1), target, rtn.RTNConfig(),
                               SolveContext(quant=spec))


def test_hand_case_two_bits_one_group() -> None:
    # s = (0.9 − (−0.3))/3 = 0.4, z = −round(−0.75) = 1; codes round(w/0.4) + 1
    W = torch.tensor([[-0.3, 0.1, 0.5, 0.9]])
    result = solve(W, QuantSpec(2, 4))
    assert result.quant.codes.tolist() == [[0, 1, 2, 3]]
    assert torch.allclose(result.weight, torch.tensor([[-0.4, 0.0, 0.4, 0.8]]))
    assert torch.equal(result.weight, dequantize(result.quant))


@pytest.mark.parametrize("spec", (QuantSpec(4, 64), QuantSpec(3, 100), QuantSpec(8, 0), QuantSpec(4, 32, True)),
                         ids=str)
def test_equals_the_quant_core_and_keeps_every_weight(spec: QuantSpec) -> None:
    W = torch.randn(16, 256, generator=torch.Generator().manual_seed(0))
    before = W.clone()
    result = solve(W, spec)
    reference = quantize(W, spec)
    assert torch.equal(result.quant.codes, reference.codes) and torch.equal(result.weight, dequantize(reference))
    assert bool(result.keep_mask.all()) and torch.equal(W, before)
    per_group = result.weight.reshape(16, -1, spec.group_size) if spec.group_size in (32, 64) else None
    if per_group is not None:  # at most 2**bits distinct values per group
        assert all(len(torch.unique(g)) <= spec.levels for g in per_group.reshape(-1, spec.group_size))


def test_contract_fields_and_errors() -> None:
    spec = get_method("rtn")
    assert spec.produces == frozenset({Produces.QUANT}) and spec.targets == ()
    spec.check(Compression(quant=QuantSpec(4)))
    with pytest.raises(ToolkitError):
        spec.check(Compression(sparsity=Unstructured(0.5), quant=QuantSpec(4)))
    with pytest.raises(ToolkitError, match="--quant"):
        solve(torch.randn(2, 8), None)
    with pytest.raises(ToolkitError, match="only quantizes"):
        solve(torch.randn(2, 8), QuantSpec(4), Unstructured(0.5))
