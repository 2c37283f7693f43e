"""The structure adapter: families, unit costs, the GQA slot layout."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.block_models import tiny
from toolkit.errors import ToolkitError
from toolkit.models.layers import decoder_layers
from toolkit.models.structure import block_views, check_unit, family_of, head_units, slot_layout, unit_costs
from toolkit.spec.compression import Unit


@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral", "gemma", "opt", "mixtral"])
def test_views_read_counts_from_shapes(family: str) -> None:
    model = tiny(family)
    view = block_views(model, decoder_layers(model))[0]
    heads, kv = (8, 8) if family == "opt" else (9, 3)
    assert (view.num_heads, view.num_kv_heads, view.head_dim) == (heads, kv, 8)
    assert view.intermediate == (0 if family == "mixtral" else 96)
    assert view.name("o") == ("self_attn.out_proj" if family == "opt" else "self_attn.o_proj")


def test_unknown_family_names_the_known_ones() -> None:
    with pytest.raises(ToolkitError, match=r"gpt2.*Llama/Qwen2/Mistral/Gemma.*llama.*qwen2.*gemma.*opt"):
        family_of(tiny("gpt2"))


def test_moe_has_no_channels() -> None:
    family = family_of(tiny("mixtral"))
    check_unit(family, Unit.HEADS, "mixtral")
    with pytest.raises(ToolkitError, match=r"mixture of experts.*its units: heads"):
        check_unit(family, Unit.CHANNELS, "mixtral")


def test_unit_costs_from_real_shapes() -> None:
    view = block_views(m := tiny("llama"), decoder_layers(m))[0]
    D, dh = 72, 8
    assert unit_costs(view, "groups") == ((2 * 3 + 2) * D * dh, 3 * D)  # 3 query heads + 1 KV head
    assert unit_costs(view, "query") == (2 * D * dh, 3 * D)
    mha = block_views(m := tiny("llama", heads=8, kv_heads=8), decoder_layers(m))[0]
    assert unit_costs(mha, "query")[0] == unit_costs(mha, "groups")[0] == 4 * D * dh  # α = 4·Dh/3 channels
    assert unit_costs(mha, "groups")[0] / unit_costs(mha, "groups")[1] == pytest.approx(4 * dh / 3)
    assert head_units(view, "groups").tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_slot_layout_never_orphans_a_query_head() -> None:
    keep = torch.tensor([True, True, True, False, False, False, True, True, True])  # whole groups
    whole = slot_layout(keep, 3, head_cost=10, kv_cost=10)
    assert (whole.slots, whole.kv, whole.group) == ((0, 1, 2, 6, 7, 8), (0, 2), 3)
    uneven = torch.tensor([True, True, True, True, True, False, True, False, False])  # 3, 2, 1 kept
    for head_cost, kv_cost in ((10, 1), (1, 10), (5, 5)):
        layout = slot_layout(uneven, 3, head_cost, kv_cost)
        for slot, head in enumerate(layout.slots):
            if head >= 0:  # slot s reads KV head kv[s // group]: the one head h read before
                assert layout.kv[slot // layout.group] == head // 3
        assert sorted(h for h in layout.slots if h >= 0) == [0, 1, 2, 3, 4, 6]
    assert slot_layout(uneven, 3, 1, 10).group == 3  # KV heads expensive: pad with zero heads
    assert slot_layout(uneven, 3, 10, 1).group == 1  # query heads expensive: copy KV heads
