"""magnitude-sp, wanda-sp and FLAP unit scores on hand-checkable tensors."""

from __future__ import annotations

import pytest
import torch

from toolkit.errors import ToolkitError
from toolkit.methods import get_method
from toolkit.methods.base import Produces, Scope
from toolkit.methods.block.base import BlockStats, BlockTensors, HeadLayout, InputStats
from toolkit.methods.block.scores import flap_score, magnitude_score, wanda_sp_score

# 2 query heads of Dh = 2 sharing 1 KV head (n_rep = 2), hidden D = 2, 3 MLP channels
Q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [0.0, 2.0]])  # (H·Dh, D)
K = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
OUT = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 3.0, 0.0]])  # (D, H·Dh)
UP = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 2.0]])
GATE = torch.zeros(3, 2)
DOWN = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
TENSORS = BlockTensors({"q": Q, "k": K, "v": K.clone(), "o": OUT, "gate": GATE, "up": UP, "down": DOWN},
                       dict.fromkeys(("q", "k", "v", "o", "gate", "up", "down")))
ATTN = InputStats(gram=torch.diag(torch.tensor([4.0, 1.0, 9.0, 0.0])), mean=torch.tensor([1.0, 1.0, 0.0, 0.0]),
                  count=8)
MLP = InputStats(gram=torch.diag(torch.tensor([1.0, 4.0, 16.0])), mean=torch.tensor([1.0, 0.0, 2.0]), count=8)
QUERY = HeadLayout(torch.arange(2), 2, 2, 2, owns_kv=False)
GROUP = HeadLayout(torch.zeros(2, dtype=torch.long), 2, 2, 1, owns_kv=True)


def test_magnitude_sp_is_the_norm_of_the_unit_weights() -> None:
    scores = magnitude_score(TENSORS, BlockStats(ATTN, MLP), QUERY, 0.3, get_method("magnitude-sp").make_config())
    # head 0: q rows 1+1, o columns 1+1 → √4; head 1: q rows 4+4, o columns 9 → √17
    torch.testing.assert_close(scores.heads, torch.tensor([2.0, 17.0**0.5]))
    torch.testing.assert_close(scores.channels, torch.tensor([2.0**0.5, 0.0, 5.0**0.5]))
    group = magnitude_score(TENSORS, BlockStats(ATTN, None), GROUP, 0.3, get_method("magnitude-sp").make_config())
    torch.testing.assert_close(group.heads, torch.tensor([(4.0 + 17.0 + 8.0) ** 0.5]))  # + k and v rows
    assert group.channels is None


def test_wanda_sp_is_mean_abs_weight_times_input_norm() -> None:
    scores = wanda_sp_score(TENSORS, BlockStats(ATTN, MLP), QUERY, 0.3, get_method("wanda-sp").make_config())
    # o columns: mean|W| = (0.5, 0.5, 1.5, 0) × ‖x‖ = (2, 1, 3, 0) → (1, 0.5, 4.5, 0); heads average pairs
    torch.testing.assert_close(scores.head_channels, torch.tensor([1.0, 0.5, 4.5, 0.0]))
    torch.testing.assert_close(scores.heads, torch.tensor([0.75, 2.25]))
    torch.testing.assert_close(scores.channels, torch.tensor([0.5, 0.0, 2.0]))


def test_flap_is_input_variance_times_squared_column_norm() -> None:
    scores = flap_score(TENSORS, BlockStats(ATTN, MLP), QUERY, 0.3, get_method("flap").make_config())
    # variance = diag G − μ² = (3, 0, 9, 0); ‖W_:,j‖² = (1, 1, 9, 0)
    torch.testing.assert_close(scores.head_channels, torch.tensor([3.0, 0.0, 81.0, 0.0]))
    torch.testing.assert_close(scores.heads, torch.tensor([1.5, 40.5]))
    torch.testing.assert_close(scores.channels, torch.tensor([0.0, 0.0, 12.0]))  # variances (0, 4, 12) × (1, 0, 1)


@pytest.mark.parametrize("name, compensate, standardize", [("flap", "bias", True), ("wanda-sp", "none", True),
                                                           ("magnitude-sp", "none", True),
                                                           ("numerical", "least_squares", False)])
def test_registered_block_methods(name: str, compensate: str, standardize: bool) -> None:
    spec = get_method(name)
    cfg = spec.make_config()
    assert spec.scope is Scope.BLOCK and spec.produces == frozenset({Produces.STRUCTURE})
    assert (cfg.compensate, cfg.standardize, cfg.allocation, cfg.gqa) == (compensate, standardize,
                                                                           "param_weighted", "groups")
    with pytest.raises(ToolkitError, match="block-scope"):
        spec.fn(torch.zeros(2, 2), None, None, cfg, None)
    with pytest.raises(ToolkitError, match="must be one of"):
        spec.make_config({"gqa": "kv"})
