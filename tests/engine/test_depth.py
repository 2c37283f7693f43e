"""Depth pruning: layer scores, the choice, a physically shorter model that plain transformers loads alike."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.helpers.block_models import VOCAB, logits, prune, tiny, windows
from toolkit.engine.block.depth import check_depth, remove_layers
from toolkit.engine.block.driver import check_block_budget, prune_blocks
from toolkit.engine.state import EngineConfig
from toolkit.engine.writeback import WriteBack
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import DepthScored, LayerDone, SublayerPruned
from toolkit.methods import get_method
from toolkit.models.layers import decoder_layers
from toolkit.spec.compression import parse_compression


def gemma3(layers: int = 6) -> nn.Module:
    """A tiny Gemma-3 text model: sliding-window layers and one full-attention layer (``layer_types``)."""
    import transformers as tf

    config = tf.Gemma3TextConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                 max_position_embeddings=128, sliding_window=8)
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, p.shape[1] ** -0.5)
    return model.float().eval()


def qwen2_sliding(layers: int = 6) -> nn.Module:
    """A tiny Qwen2 whose layers from ``max_window_layers`` = 3 on use a sliding window."""
    import transformers as tf

    config = tf.Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
                            num_attention_heads=4, num_key_value_heads=2, use_sliding_window=True, sliding_window=8,
                            max_window_layers=3, max_position_embeddings=128)
    torch.manual_seed(0)
    return tf.AutoModelForCausalLM.from_config(config).float().eval()


MODELS = {"llama": lambda: tiny("llama", layers=5), "qwen2": qwen2_sliding, "gemma3": gemma3}


def _attention_indices(model: nn.Module) -> list[int]:
    return [int(getattr(layer, "self_attn").layer_idx) for layer in decoder_layers(model)]  # noqa: B009


def cfg(model: nn.Module) -> Any:
    """The model's transformers config."""
    return getattr(model, "config")  # noqa: B009


@pytest.mark.parametrize("family", sorted(MODELS))
def test_middle_layers_removed_reload_in_plain_transformers_with_equal_logits(family: str, tmp_path: Path) -> None:
    """Layers 1 and 3 go: config and layer_idx follow, the saved folder reloads alike, the KV cache agrees."""
    from transformers import AutoModelForCausalLM

    model = MODELS[family]()
    dense = logits(model)
    old_types = list(getattr(cfg(model), "layer_types", None) or [])
    changes = remove_layers(model, [1, 3], WriteBack())
    count = len(decoder_layers(model))
    assert count == cfg(model).num_hidden_layers == (5 if family == "llama" else 6) - 2
    assert _attention_indices(model) == list(range(count))
    if old_types:
        kept = [i for i in range(len(old_types)) if i not in (1, 3)]
        assert cfg(model).layer_types == [old_types[i] for i in kept] == changes["layer_types"]
    if family == "qwen2":  # layers 0, 2 below the old boundary 3: two kept layers without a sliding window
        assert cfg(model).max_window_layers == 2
        assert cfg(model).layer_types == ["full_attention"] * 2 + ["sliding_attention"] * 2
    mine = logits(model)
    assert not torch.allclose(mine, dense)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert len(decoder_layers(loaded)) == count
    torch.testing.assert_close(logits(loaded), mine, rtol=0, atol=1e-5)
    ids = windows(1, 20, seed=3)
    with torch.no_grad():  # incremental decoding through the KV cache gives the full forward's logits
        full = model(input_ids=ids).logits[:, -1]
        cache = model(input_ids=ids[:, :-1], use_cache=True).past_key_values
        step = model(input_ids=ids[:, -1:], past_key_values=cache, use_cache=True).logits[:, -1]
    torch.testing.assert_close(step, full, rtol=1e-4, atol=1e-4)


def _brute_influence(model: nn.Module, ids: torch.Tensor) -> list[float]:
    """1 − mean token cosine between each layer's input and output, from HF's hidden states (not the last layer:
    HF's last hidden state is after the final norm)."""
    with torch.no_grad():
        states = model(input_ids=ids, output_hidden_states=True).hidden_states
    return [1.0 - float(torch.nn.functional.cosine_similarity(states[i], states[i + 1], dim=-1).mean())
            for i in range(len(states) - 2)]


def test_block_influence_matches_the_hidden_states_and_the_lowest_go() -> None:
    model = tiny("llama", layers=5)
    reference = _brute_influence(model, windows())
    result, events, _, structures = prune(model, method="depth", ratio="structured:2 layers")
    (scored,) = [e for e in events if isinstance(e, DepthScored)]
    assert scored.score == "bi" and scored.num_layers == 5 and scored.block == 2 and scored.angular == []
    assert scored.influence[:4] == pytest.approx(reference, rel=1e-4, abs=1e-6)
    lowest = sorted(range(5), key=lambda i: scored.influence[i])[:2]
    assert scored.removed == sorted(lowest) == structures[0]["removed_layers"]
    assert len(decoder_layers(model)) == 3 and cfg(model).num_hidden_layers == 3
    assert result.achieved_sparsity == pytest.approx(0.4) and result.params_after == result.params_before * 3 // 5
    done = [e for e in events if isinstance(e, LayerDone)]
    assert [d.output_rel_error > 0 for d in done] == [i in scored.removed for i in range(5)]
    gone = [e for e in events if isinstance(e, SublayerPruned) and e.sparsity == 1.0]
    assert {e.layer for e in gone} == set(scored.removed) and all(e.rel_error == 1.0 for e in gone)


def test_angular_distance_picks_the_closest_consecutive_block() -> None:
    model = tiny("qwen2", layers=6)
    with torch.no_grad():
        states = model(input_ids=windows(), output_hidden_states=True).hidden_states
    n = 2
    expected = [float(torch.arccos(torch.nn.functional.cosine_similarity(states[i], states[i + n], dim=-1)
                                   .clamp(-1, 1)).mean()) / math.pi for i in range(6 - n)]  # HF's last is normed
    _, events, _, structures = prune(model, method="depth", ratio="structured:34%", score="angular")
    (scored,) = [e for e in events if isinstance(e, DepthScored)]
    assert scored.block == 2 and len(scored.angular) == 5
    assert scored.angular[:4] == pytest.approx(expected, rel=1e-4, abs=1e-6)
    start = min(range(5), key=lambda i: scored.angular[i])
    assert scored.removed == [start, start + 1] == structures[0]["removed_layers"]
    assert len(decoder_layers(model)) == 4


def test_a_cancelled_depth_run_restores_the_model() -> None:
    model = tiny("llama", layers=4)
    before = logits(model)
    spec = get_method("depth")
    calls = []

    def cancelled() -> bool:
        calls.append(1)
        return len(calls) > 3

    with pytest.raises(RunCancelled):
        prune_blocks(model, windows(), spec, parse_compression("structured:1 layer"), spec.make_config({}),
                     cfg=EngineConfig(batch_size=3, device="cpu"), emit=lambda e: None, cancelled=cancelled,
                     writeback=WriteBack())
    assert len(decoder_layers(model)) == 4 and cfg(model).num_hidden_layers == 4
    torch.testing.assert_close(logits(model), before, rtol=0, atol=0)


@pytest.mark.parametrize(("method", "sparsity", "unit", "message"), [
    ("depth", "structured:5 layers", None, "would remove 5 of the model's 5 decoder layers"),
    ("depth", "structured:9 layers", "layers", "at most 4 can go"),
    ("depth", "structured:5%", None, "removes no layer"),
    ("depth", "structured:100%", None, "outside [0, 1)"),
    ("depth", "50%", None, "removes whole decoder layers: use --sparsity structured:N layers"),
    ("depth", "structured:30%", "heads", "depth cannot remove --unit heads"),
    ("numerical", "structured:30%", "layers", "numerical cannot remove --unit layers"),
    ("flap", "structured:2 layers", None, "flap removes heads and channels, structured:2 layers counts whole"),
    ("numerical", "structured:2 layers", "heads", "counts whole decoder layers: use --unit layers"),
    ("depth", "structured:0 layers", None, "cannot remove 0 layers"),
])
def test_bad_depth_requests_are_one_line_before_any_work(method: str, sparsity: str, unit: str | None,
                                                         message: str) -> None:
    model = tiny("llama", layers=5)
    spec = get_method(method)
    with pytest.raises(ToolkitError, match=None) as caught:
        check_block_budget(model, spec, parse_compression(sparsity, None, unit), spec.make_config({}))
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert len(decoder_layers(model)) == 5


def test_a_fraction_rounds_to_whole_layers() -> None:
    model = tiny("llama", layers=5)
    assert check_depth(model, get_method("depth"), parse_compression("structured:30%", None, "layers")) == 2
    pruned = copy.deepcopy(model)
    prune(pruned, method="depth", ratio="structured:30%", unit="layers")
    assert len(decoder_layers(pruned)) == 3
