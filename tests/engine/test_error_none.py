"""``error="none"``: no dense pass and no computation for the layer output error, the same pruning.

Every LayerDone's error is None (not 0, not NaN), the weights are bit-identical to the sampled run's, and
the layer forwards that ran only to give the error's dense outputs do not run.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.helpers import block_models
from tests.helpers.counted_prune import prune_counting, synthetic_windows
from toolkit.engine.prune import prune_layers
from toolkit.engine.state import EngineConfig
from toolkit.errors import ToolkitError
from toolkit.events import LayerDone, SublayerPruned, event_from_dict
from toolkit.methods import get_method
from toolkit.models.layers import decoder_layers
from toolkit.models.load import load_model
from toolkit.spec.compression import parse_compression
from toolkit.spec.targets import Unstructured


def _prune(model: nn.Module, method: str, **engine: Any) -> tuple[list, int]:
    """Prune ``model`` in place at 50 %; returns (events, completed forwards of the decoder layers)."""
    return prune_counting(model, method, Unstructured(0.5), **engine)


def _assert_same_weights(a: nn.Module, b: nn.Module) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


CASES = [
    ("tiny-llama", "wanda", {"fused": "off"}),
    ("tiny-llama", "wanda", {"fused": "on"}),
    ("tiny-qwen2", "magnitude", {"fused": "off", "calibrate": "always"}),  # data-free: the calibrated path asked
    ("tiny-llama", "sparsegpt", {"fused": "off"}),
    ("tiny-llama", "sparsegpt", {"fused": "on"}),
    ("tiny-gpt2", "sparsegpt", {"sequential": "layer"}),
    ("tiny-opt", "wanda", {"propagate": "dense", "fused": "off"}),
]


@pytest.mark.parametrize(("family", "method", "engine"), CASES)
def test_error_none_prunes_bit_identically_and_reports_no_error(family: str, method: str, engine: dict) -> None:
    sampled = load_model(family).model
    unmeasured = copy.deepcopy(sampled)
    events_sample, forwards_sample = _prune(sampled, method, **engine)
    events_none, forwards_none = _prune(unmeasured, method, error="none", **engine)
    _assert_same_weights(sampled, unmeasured)
    done_sample = [e for e in events_sample if isinstance(e, LayerDone)]
    done_none = [e for e in events_none if isinstance(e, LayerDone)]
    assert len(done_none) == len(done_sample) == len(decoder_layers(sampled))
    assert all(isinstance(e.output_rel_error, float) and e.output_rel_error > 0 for e in done_sample)
    assert all(e.output_rel_error is None for e in done_none)
    # the per-linear errors come from the statistics the solve uses: they stay, unchanged
    linear_errors = [[e.rel_error for e in ev if isinstance(e, SublayerPruned)] for ev in (events_sample, events_none)]
    assert linear_errors[0] == linear_errors[1]
    assert forwards_none <= forwards_sample


@pytest.mark.parametrize(("method", "engine", "saved"), [
    ("wanda", {"fused": "on"}, 1),  # the dense pass of the first error_windows windows, one per layer
    ("wanda", {"fused": "off"}, 1),  # the one batch (2 windows) of the sample run to the layer's output
    ("sparsegpt", {"fused": "off"}, 1),  # a Gram method's sample too: the first batch to the layer's output
    ("sparsegpt", {"fused": "off", "sequential": "layer"}, 1),
])
def test_error_none_runs_no_layer_forward_for_the_error(method: str, engine: dict, saved: int) -> None:
    """The passes that ran to the layer's output only for the error stop at the last group's input instead."""
    model = load_model("tiny-llama").model
    _, sampled = _prune(copy.deepcopy(model), method, **engine)
    _, unmeasured = _prune(model, method, error="none", **engine)
    assert sampled - unmeasured == saved * len(decoder_layers(model))


def test_layer_done_round_trips_none_as_null() -> None:
    event = LayerDone(layer=0, num_layers=2, output_rel_error=None, seconds=0.5)
    data = json.loads(json.dumps(event.to_dict()))
    assert data["output_rel_error"] is None
    back = event_from_dict(data)
    assert isinstance(back, LayerDone) and back.output_rel_error is None


@pytest.mark.parametrize("grams", ["dense", "sequential"])
def test_block_scope_error_none_same_structure_no_error(grams: str) -> None:
    model = block_models.tiny("llama")
    unmeasured = copy.deepcopy(model)
    spec = get_method("numerical")
    results = []
    for target, error in ((model, "sample"), (unmeasured, "none")):
        events: list = []
        cfg = EngineConfig(batch_size=3, device="cpu", error_windows=2, error=error)
        block_models.prune_blocks(target, block_models.windows(), spec, parse_compression("structured:30%", None, None),
                                  spec.make_config({"grams": grams}), cfg=cfg, emit=events.append,
                                  writeback=block_models.WriteBack())
        results.append([e.output_rel_error for e in events if isinstance(e, LayerDone)])
    _assert_same_weights(model, unmeasured)
    assert all(isinstance(v, float) for v in results[0]) and len(results[0]) == 3
    assert results[1] == [None, None, None]


def test_depth_error_none_reports_no_layer_error() -> None:
    model = load_model("tiny-llama").model
    spec = get_method("depth")
    events: list = []
    prune_layers(model, synthetic_windows(), spec, parse_compression("structured:1 layer", None, None),
                 spec.make_config(), emit=events.append, cfg=EngineConfig(batch_size=2, device="cpu", error="none"))
    done = [e for e in events if isinstance(e, LayerDone)]
    assert done and all(e.output_rel_error is None for e in done)


def test_an_unknown_error_mode_is_refused() -> None:
    with pytest.raises(ToolkitError, match="error must be one of"):
        EngineConfig(error="all")


def test_the_sample_is_error_windows_windows_fused_or_not() -> None:
    """SparseGPT's error covers the first ``error_windows`` windows in both passes: the same figure, the same count."""
    errors, windows = [], []
    for fused in ("on", "off"):
        model = load_model("tiny-llama").model
        spec = get_method("sparsegpt")
        events: list = []
        result = prune_layers(model, synthetic_windows(), spec, Unstructured(0.5),
                              spec.make_config({"damp_frac": "0.1"}), emit=events.append,
                              cfg=EngineConfig(batch_size=2, device="cpu", error_windows=2, fused=fused))
        errors.append([e.output_rel_error for e in events if isinstance(e, LayerDone)])
        windows.append(result.error_windows)
    assert windows == [2, 2]
    assert errors[0] == pytest.approx(errors[1], rel=1e-3)


def test_a_streamed_run_with_error_none_writes_the_sampled_runs_shards(tmp_path: Path) -> None:
    """``--stream`` prunes each layer with the same engine step: the same shards, no layer output error."""
    from tests.models.test_stream import save_tiny
    from toolkit.engine.stream import prune_streaming
    from toolkit.models.stream import open_streamed

    source = save_tiny(tmp_path / "src", "llama", "bfloat16")
    spec = get_method("sparsegpt")
    shards, errors = [], []
    for error in ("sample", "none"):
        events: list = []
        prune_streaming(open_streamed(source), tmp_path / error, synthetic_windows(), spec, Unstructured(0.5),
                        spec.make_config(), cfg=EngineConfig(device="cpu", batch_size=2, error=error),
                        emit=events.append)
        shards.append({p.name: p.read_bytes() for p in sorted((tmp_path / error).glob("*.safetensors"))})
        errors.append([e.output_rel_error for e in events if isinstance(e, LayerDone)])
    assert shards[0] == shards[1] and shards[0]
    assert all(isinstance(v, float) for v in errors[0]) and errors[1] == [None] * len(errors[0])
