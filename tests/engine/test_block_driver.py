"""prune_blocks on tiny random decoders: exact physical removal, GQA, events, cancel/failure restore, bad input."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.helpers.block_models import logits, prune, pruned_and_masked, tiny, windows
from toolkit.engine.block import driver as block_engine
from toolkit.engine.state import EngineConfig
from toolkit.engine.writeback import WriteBack
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import (
    GlobalRanking,
    LayerDone,
    LayerScored,
    LayerStarted,
    SolverStep,
    SublayerPruned,
    UnitsRemoved,
    event_from_dict,
)
from toolkit.methods import get_method
from toolkit.models.layers import decoder_layers
from toolkit.models.structure import block_views
from toolkit.spec.compression import parse_compression


def _shapes(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


@pytest.mark.parametrize("family, options", [
    ("llama", {}), ("llama", {"gqa": "query"}), ("llama", {"grams": "sequential"}),
    ("qwen2", {}), ("gemma", {"gqa": "query"}), ("opt", {}), ("mistral", {"method": "flap"}),
    ("llama", {"method": "wanda-sp", "gqa": "query"}), ("llama", {"method": "magnitude-sp"}),
])
def test_removal_is_exact_against_the_masked_model(family: str, options: dict) -> None:
    model = tiny(family)
    removed, masked, result = pruned_and_masked(model, ratio="structured:40%", **options)
    torch.testing.assert_close(logits(removed), logits(masked), atol=1e-5, rtol=0)
    assert result.params_after < result.params_before
    assert sum(p.numel() for p in removed.parameters()) == result.model_params_after
    assert _shapes(masked) != _shapes(removed)
    assert all(len(d) > 0 for d in (result.structure["layers"], result.layers))


@pytest.mark.parametrize("gqa", ["groups", "query"])
def test_gqa_mapping_is_preserved(gqa: str) -> None:
    model = tiny("llama")
    result = prune(model, ratio="structured:45%", unit="heads", gqa=gqa)[0]
    for record, view in zip(result.structure["layers"], block_views(model, decoder_layers(model)), strict=True):
        group = record["kv_group"]
        assert view.num_heads == len(record["heads_kept"]) == group * len(record["kv_heads"])
        assert view.attn.num_key_value_groups == group
        for slot, head in enumerate(record["heads_kept"]):
            if head >= 0:  # every kept query head still reads its own KV head
                assert record["kv_heads"][slot // group] == head // 3
        if gqa == "groups":
            assert group == 3 and -1 not in record["heads_kept"]


def test_heads_and_channels_alone_and_a_layer_never_empties() -> None:
    model = tiny("qwen2")
    heads = prune(copy.deepcopy(model), ratio="structured:60%", unit="heads")[0]
    assert {r["intermediate_size"] for r in heads.structure["layers"]} == {96}
    assert all(r["num_heads"] >= 3 for r in heads.structure["layers"])
    channels = prune(copy.deepcopy(model), ratio="structured:60%", unit="channels", min_channels=4)[0]
    assert {r["num_heads"] for r in channels.structure["layers"]} == {9}
    assert all(r["intermediate_size"] >= 4 for r in channels.structure["layers"])


def test_event_sequence_and_json_round_trip() -> None:
    model = tiny("llama", layers=2)
    result, events, _, structures = prune(model, score_solver="newton", newton_steps=3)
    kinds = [type(e) for e in events if not isinstance(e, SolverStep)]
    assert kinds[:3] == [LayerScored, LayerScored, GlobalRanking]
    rest = kinds[3:]
    assert rest.count(LayerStarted) == rest.count(LayerDone) == 2
    second = rest.index(LayerStarted, 1)
    for block in (rest[:second], rest[second:]):
        modules = block.count(SublayerPruned)
        assert modules in (3, 4, 7)  # MLP (gate, up, down), attention (q, k, v, o) or both
        assert block == [LayerStarted] + [SublayerPruned] * modules + [UnitsRemoved] * 3 + [LayerDone]
    assert len(result.layers) == rest.count(SublayerPruned) > 0
    assert sum(isinstance(e, SolverStep) for e in events) == 2 * 2 * (1 + 3)  # layers × (o, down) × (z₀ + steps)
    for event in events:
        assert event_from_dict(event.to_dict()) == event or isinstance(event, GlobalRanking)
    assert structures == [result.structure] and result.achieved_sparsity == pytest.approx(0.3, abs=0.03)


def test_compensation_never_raises_the_output_projection_error() -> None:
    events = prune(tiny("llama"), ratio="structured:40%")[1]
    removed = [e for e in events if isinstance(e, UnitsRemoved) and e.removed > 0]
    assert removed and all(e.rel_error <= e.rel_error_uncompensated + 1e-9 for e in removed)


def test_paper_literal_runs_and_rarely_touches_heads() -> None:
    result, events, _, _ = prune(tiny("llama"), allocation="paper_literal")
    ranking = next(e for e in events if isinstance(e, GlobalRanking))
    assert ranking.heads_removed == 0 and ranking.channels_removed > 0  # α·z_head ≫ z_mlp
    assert result.params_after < result.params_before


@pytest.mark.parametrize("when", ["scoring", "removing"])
def test_cancel_restores_the_original_shapes(when: str) -> None:
    model = tiny("llama")
    dense, shapes = logits(model), _shapes(model)
    seen: list = []
    stop = LayerScored if when == "scoring" else LayerDone
    spec_events = []

    def cancelled() -> bool:
        return any(isinstance(e, stop) for e in seen)

    journal = WriteBack()
    with pytest.raises(RunCancelled):
        block_engine.prune_blocks(model, windows(), get_method("numerical"), parse_compression("structured:30%"),
                                  get_method("numerical").make_config(), cfg=EngineConfig(device="cpu"),
                                  emit=seen.append, cancelled=cancelled, writeback=journal,
                                  on_structure=spec_events.append)
    assert _shapes(model) == shapes and len(journal) == 0 and not spec_events
    torch.testing.assert_close(logits(model), dense, atol=0, rtol=0)


def test_failure_midway_restores_and_the_journal_undoes_success(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny("llama")
    dense, shapes = logits(model), _shapes(model)
    calls = []
    original = block_engine.shrink_channels

    def fail_second(*args: object) -> dict:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return original(*args)

    monkeypatch.setattr(block_engine, "shrink_channels", fail_second)
    with pytest.raises(RuntimeError, match="boom"):
        prune(model)
    assert _shapes(model) == shapes
    monkeypatch.undo()
    journal = prune(model)[2]
    assert _shapes(model) != shapes
    journal.restore()
    assert _shapes(model) == shapes and model.config.num_attention_heads == 9
    torch.testing.assert_close(logits(model), dense, atol=0, rtol=0)


def test_bad_input_is_a_clear_toolkit_error() -> None:
    with pytest.raises(ToolkitError, match="would remove every head or channel"):
        prune(tiny("llama"), ratio="structured:99%")
    with pytest.raises(ToolkitError, match="mixture of experts"):
        prune(tiny("mixtral"), unit="channels")
    with pytest.raises(ToolkitError, match="Llama/Qwen2/Mistral/Gemma"):
        prune(tiny("gpt2"))
    with pytest.raises(ToolkitError, match="structured"):
        prune(tiny("llama"), ratio="50%")
    model = tiny("mixtral")  # an MoE model still loses heads
    assert prune(model, unit="heads")[0].params_after < _count(tiny("mixtral"))


def _count(model: torch.nn.Module) -> int:
    return sum(v.params() for v in block_views(model, decoder_layers(model)))


def test_gqa_query_warns_when_padding_keeps_planned_parameters() -> None:
    from toolkit.events import RunWarning

    result, events, _, _ = prune(tiny("llama"), ratio="structured:30%", unit="heads", gqa="query")
    ranking = next(e for e in events if isinstance(e, GlobalRanking))
    removed = result.params_before - result.params_after
    assert removed < ranking.params_removed  # uneven KV groups keep zero heads: the plan is not met
    (warning,) = [e for e in events if isinstance(e, RunWarning)]
    assert f"{removed / ranking.params_total:.1%} of the candidate parameters" in warning.message
    assert "gqa=groups" in warning.message
    grouped = prune(tiny("llama"), ratio="structured:30%", unit="heads")[1]
    assert not [e for e in grouped if isinstance(e, RunWarning)]  # whole groups: exactly the plan
