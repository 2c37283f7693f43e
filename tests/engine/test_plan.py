"""Global allocation of heads and channels (toolkit.engine.block.plan)."""

from __future__ import annotations

import pytest
import torch

from toolkit.engine.block.plan import LayerCandidates, LayerOffer, allocate, check_budget, standardized
from toolkit.errors import ToolkitError
from toolkit.methods.block import numerical
from toolkit.methods.block.base import BlockConfig, UnitScores
from toolkit.spec.compression import Unit


def _layer(heads: list[float], channels: list[float], head_cost: int = 10, channel_cost: int = 1,
           groups: list[int] | None = None) -> LayerCandidates:
    return LayerCandidates(UnitScores(torch.tensor(heads), torch.tensor(channels)), head_cost, channel_cost,
                           None if groups is None else torch.tensor(groups))


def test_param_weighted_removes_lowest_until_the_budget() -> None:
    # total = 2·(2·10 + 10·1) = 60 parameters; 30% = 18: the lowest are layer 1 head (0.1, cost 10), then
    # channels 0.2, 0.25, ... (cost 1 each) until 18 → 8 channels
    layers = [_layer([0.9, 0.8], [0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.9, 0.95, 0.97, 0.99]),
              _layer([0.1, 0.95], [0.2, 0.25, 0.45, 0.55, 0.96, 0.98, 0.99, 0.99, 0.99, 0.99])]
    plan = allocate(layers, 0.3, Unit.HEADS_CHANNELS, BlockConfig())
    assert plan.removed_cost == 18 and plan.total_cost == 60
    assert plan.keep_heads[1].tolist() == [False, True] and bool(plan.keep_heads[0].all())
    assert int((~plan.keep_channels[0]).sum()) + int((~plan.keep_channels[1]).sum()) == 8
    assert plan.achieved_ratio == pytest.approx(0.3)


def test_paper_literal_multiplies_heads_by_alpha_and_counts_units() -> None:
    layers = [_layer([0.7, 0.7], [0.6, 0.65, 0.9, 0.95]), _layer([0.1, 0.7], [0.2, 0.8, 0.9, 0.99])]
    plan = allocate(layers, 0.25, Unit.HEADS_CHANNELS, BlockConfig(allocation="paper_literal"))
    # α = 10: head scores become ≥ 1 → only channels go; ⌊0.25 · 12⌋ = 3 units
    assert all(bool(m.all()) for m in plan.keep_heads)
    assert [m.tolist() for m in plan.keep_channels] == [[False, False, True, True], [False, True, True, True]]


def test_minimum_kept_per_layer_and_impossible_ratio() -> None:
    layers = [_layer([0.1, 0.2], [0.1, 0.2]), _layer([0.9, 0.95], [0.9, 0.95])]
    plan = allocate(layers, 0.45, Unit.HEADS_CHANNELS, BlockConfig())
    for mask in plan.keep_heads + plan.keep_channels:
        assert int(mask.sum()) >= 1
    with pytest.raises(ToolkitError, match="would remove every head or channel"):
        allocate(layers, 0.9, Unit.HEADS_CHANNELS, BlockConfig())
    with pytest.raises(ToolkitError, match="at most"):
        allocate(layers, 0.6, Unit.HEADS, BlockConfig())


def test_units_restrict_the_candidates() -> None:
    layers = [_layer([0.1, 0.2], [0.05, 0.2]), _layer([0.9, 0.95], [0.9, 0.01])]
    heads = allocate(layers, 0.25, Unit.HEADS, BlockConfig())
    assert heads.keep_channels == [None, None] and heads.keep_heads[0].tolist() == [False, True]
    channels = allocate(layers, 0.5, Unit.CHANNELS, BlockConfig())
    assert channels.keep_heads == [None, None]
    assert [m.tolist() for m in channels.keep_channels] == [[False, True], [True, False]]


def test_standardize_compares_layers_on_their_own_scale() -> None:
    # layer 1's scores are all larger; standardized, its lowest channel ties layer 0's lowest
    layers = [_layer([1.0, 2.0], [0.1, 0.2, 0.3]), _layer([10.0, 20.0], [10.0, 20.0, 30.0])]
    raw = allocate(layers, 0.1, Unit.CHANNELS, BlockConfig())
    assert bool(raw.keep_channels[1].all())
    even = allocate(layers, 0.34, Unit.CHANNELS, BlockConfig(standardize=True))
    assert [m.tolist() for m in even.keep_channels] == [[False, True, True], [False, True, True]]
    torch.testing.assert_close(standardized(torch.tensor([1.0, 3.0]), torch.tensor([1.0, 2.0, 3.0])),
                               torch.tensor([-1.0, 1.0]))


def test_uniform_keeps_the_same_counts_and_balances_kv_groups() -> None:
    layers = [_layer([0.1, 0.2, 0.9, 0.8], [0.1, 0.9, 0.5, 0.6], groups=[0, 0, 1, 1]),
              _layer([0.9, 0.95, 0.7, 0.99], [0.9, 0.9, 0.1, 0.9], groups=[0, 0, 1, 1])]
    plan = allocate(layers, 0.4, Unit.HEADS_CHANNELS, BlockConfig(uniform=True))
    counts = {(int(h.sum()), int(c.sum())) for h, c in zip(plan.keep_heads, plan.keep_channels, strict=True)}
    assert len(counts) == 1
    for mask in plan.keep_heads:  # the same number of query heads from every KV group
        assert mask.view(2, 2).sum(1).tolist()[0] == mask.view(2, 2).sum(1).tolist()[1]


def test_budget_past_the_minima_is_refused_before_scoring() -> None:
    offers = [LayerOffer(heads=3, head_cost=10, channels=4, channel_cost=5)] * 2
    cfg = BlockConfig()
    check_budget(offers, 0.5, Unit.HEADS_CHANNELS, cfg)  # (2·10 + 3·5) / (30 + 20) = 70% can go
    with pytest.raises(ToolkitError, match=r"at most 70\.0% of the parameters can go"):
        check_budget(offers, 0.71, Unit.HEADS_CHANNELS, cfg)
    with pytest.raises(ToolkitError, match=r"at most 66\.7% of the parameters can go"):
        check_budget(offers, 0.7, Unit.HEADS, cfg)


def test_budget_at_most_never_exceeds_the_ratio_and_nearest_may() -> None:
    # total = 2·(2·10 + 2·1) = 44. The ranking: head 0.1 (10), head 0.15 (10), then channels (1 each), so the
    # prefixes cost 0, 10, 20, 21, ... At ρ = 0.44 (target 19.36) nearest takes 20 (two heads, 45.5 %);
    # at_most takes the longest prefix ≤ 19.36: one head (10).
    layers = [_layer([0.1, 0.9], [0.5, 0.6]), _layer([0.15, 0.95], [0.55, 0.65])]
    near = allocate(layers, 0.44, Unit.HEADS_CHANNELS, BlockConfig())
    most = allocate(layers, 0.44, Unit.HEADS_CHANNELS, BlockConfig(budget="at_most"))
    assert near.removed_cost == 20 and near.achieved_ratio > 0.44
    assert most.removed_cost == 10 and most.achieved_ratio <= 0.44
    exact = allocate(layers, 10 / 44, Unit.HEADS_CHANNELS, BlockConfig(budget="at_most"))
    assert exact.removed_cost == 10  # a prefix exactly at ρ is kept
    with pytest.raises(ToolkitError, match="budget"):
        numerical.SPEC.make_config({"budget": "below"})


def test_budget_at_most_holds_under_uniform_counts_too() -> None:
    # uniform rounds per-layer counts: to the nearest unit by default (here 40 of 88 at ρ = 0.35), down under at_most
    layers = [_layer([0.1, 0.2, 0.9, 0.8], [0.1, 0.9, 0.5, 0.6], groups=[0, 0, 1, 1]),
              _layer([0.9, 0.95, 0.7, 0.99], [0.9, 0.9, 0.1, 0.9], groups=[0, 0, 1, 1])]
    assert allocate(layers, 0.35, Unit.HEADS_CHANNELS, BlockConfig(uniform=True)).achieved_ratio > 0.35
    for ratio in (0.02, 0.1, 0.2, 0.25, 0.35, 0.4, 0.5, 0.6):
        plan = allocate(layers, ratio, Unit.HEADS_CHANNELS, BlockConfig(uniform=True, budget="at_most"))
        assert plan.removed_cost <= ratio * plan.total_cost, ratio


def test_channel_multiple_rounds_the_uniform_width_kept() -> None:
    torch.manual_seed(0)
    layers = [_layer(torch.rand(4).tolist(), torch.rand(100).tolist(), head_cost=40, channel_cost=3) for _ in range(3)]
    plain = allocate(layers, 0.3, Unit.HEADS_CHANNELS, BlockConfig(uniform=True))
    rounded = allocate(layers, 0.3, Unit.HEADS_CHANNELS, BlockConfig(uniform=True, channel_multiple=16))
    kept = {int(mask.sum()) for mask in rounded.keep_channels}
    assert len(kept) == 1 and next(iter(kept)) % 16 == 0
    assert abs(next(iter(kept)) - int(plain.keep_channels[0].sum())) <= 8  # the nearest multiple of the plan's
    at_most = allocate(layers, 0.3, Unit.HEADS_CHANNELS, BlockConfig(uniform=True, budget="at_most",
                                                                     channel_multiple=16))
    assert int(at_most.keep_channels[0].sum()) % 16 == 0 and at_most.removed_cost <= 0.3 * at_most.total_cost + 1e-9
    with pytest.raises(ToolkitError, match="add --set uniform=true"):
        BlockConfig(channel_multiple=32)
