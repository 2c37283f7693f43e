"""A quantize-only method (rtn, gptq, awq) without a grid says it needs ``--quant``, whatever sparsity came."""

from __future__ import annotations

import pytest

from toolkit.api import RunConfig
from toolkit.errors import ToolkitError
from toolkit.methods import get_method
from toolkit.spec.compression import Compression, QuantSpec
from toolkit.spec.targets import Unstructured

QUANTIZE_ONLY = ("rtn", "gptq", "awq")


@pytest.mark.parametrize("method", QUANTIZE_ONLY)
def test_no_grid_asks_for_quant_even_with_the_default_sparsity(method: str) -> None:
    message = f"{method} quantizes: give --quant int4"
    with pytest.raises(ToolkitError, match=message):
        get_method(method).check(Compression(sparsity=Unstructured(0.5)))
    with pytest.raises(ToolkitError, match=message) as caught:
        RunConfig(model="no-such-model", method=method)  # the config's default sparsity, 50%
    assert "sparsity pattern" not in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("method", QUANTIZE_ONLY)
def test_a_sparsity_beside_the_grid_is_refused_as_pruning(method: str) -> None:
    with pytest.raises(ToolkitError, match=f"{method} only quantizes and cannot prune to 50%: drop --sparsity"):
        get_method(method).check(Compression(sparsity=Unstructured(0.5), quant=QuantSpec(4)))
    get_method(method).check(Compression(quant=QuantSpec(4)))  # the grid alone is what it takes
