"""The invariant behind every calibration number: with no pruning, running the decoder layers one
by one on the captured inputs reproduces the model's own hidden states, on every tiny family
(tiny-gemma3 has sliding-window and full-attention layers with different masks and rotary bases)."""

from __future__ import annotations

import pytest
import torch

from toolkit.engine.capture import LayerInputs, SideInputs, capture_layer_inputs, run_layer
from toolkit.models.layers import decoder_layers
from toolkit.models.load import load_model
from toolkit.models.sources import TINY_FAMILIES

SEQ = 32  # longer than tiny-gemma3's sliding window (8), so its two masks differ


def _windows(num: int = 4) -> torch.Tensor:
    return torch.randint(0, 256, (num, SEQ), generator=torch.Generator().manual_seed(0))


def _reference(model: torch.nn.Module, windows: torch.Tensor) -> list[torch.Tensor]:
    """Each decoder layer's output in the model's own forward.

    output_hidden_states gives them for all layers but the last, whose entry transformers replaces
    by the final-normed last_hidden_state; the last layer's own output comes from a forward hook.
    """
    layers = decoder_layers(model)
    last: list[torch.Tensor] = []
    handle = layers[-1].register_forward_hook(lambda m, a, out: last.append(out[0] if isinstance(out, tuple) else out))
    try:
        with torch.no_grad():
            hidden = model(input_ids=windows, use_cache=False, output_hidden_states=True).hidden_states
    finally:
        handle.remove()
    assert len(hidden) == len(layers) + 1
    return [*hidden[1:-1], last[0]]


def _layer_by_layer(model: torch.nn.Module, windows: torch.Tensor, batch_size: int) -> list[torch.Tensor]:
    layers = decoder_layers(model)
    outputs = []
    with torch.no_grad():
        inputs = capture_layer_inputs(model, layers, windows, torch.device("cpu"), batch_size)
        for layer in layers:
            out = [run_layer(layer, inputs, b) for b in range(len(inputs.hidden))]
            outputs.append(torch.cat(out))
            inputs = inputs.next_layer(out)
    return outputs


@pytest.mark.parametrize("batch_size", [2, 4])  # several batches (multi-pass) and one batch (fused)
@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_layer_by_layer_equals_the_models_own_forward(family: str, batch_size: int) -> None:
    model = load_model(f"tiny-{family}").model
    windows = _windows()
    for index, (got, want) in enumerate(zip(_layer_by_layer(model, windows, batch_size), _reference(model, windows),
                                            strict=True)):
        rel = float((got - want).abs().max() / want.abs().max())
        assert rel < 1e-5, f"{family} layer {index}: max relative difference {rel:.2e}"


def test_gemma3_layer_kinds_get_their_own_side_inputs() -> None:
    model = load_model("tiny-gemma3").model
    layers = decoder_layers(model)
    inputs = capture_layer_inputs(model, layers, _windows(), torch.device("cpu"), 2)
    for sides in inputs.sides:  # per batch: one object per kind, shared by the layers of that kind
        assert sides[0] is sides[2] and sides[1] is sides[3] and sides[0] is not sides[1]
    sliding, full = inputs.sides[0][0].kwargs, inputs.sides[0][1].kwargs
    assert not torch.equal(sliding["position_embeddings"][0], full["position_embeddings"][0])


def test_head_slices_per_window_side_inputs_once_per_kind() -> None:
    hidden = torch.randn(4, 3, 2)
    rotary = (torch.ones(1, 3, 2), torch.ones(1, 3, 2))
    first = SideInputs(args=(torch.ones(4, 1, 3, 3),), kwargs={"position_embeddings": rotary, "flag": True})
    second = SideInputs(args=(torch.zeros(4, 1, 3, 3),), kwargs={"position_embeddings": rotary})
    inputs = LayerInputs(hidden=[hidden], sides=[[first, second, first]], layer=1)
    head = inputs.head(2)
    assert head.layer == 1 and head.hidden[0].shape == (2, 3, 2)
    assert head.side(0).args[0].shape == (2, 1, 3, 3) and float(head.side(0).args[0].sum()) == 0.0
    assert head.sides[0][0] is head.sides[0][2] and head.sides[0][0].args[0].shape == (2, 1, 3, 3)
    assert head.sides[0][0].kwargs["position_embeddings"][0].shape == (1, 3, 2)
    assert head.sides[0][0].kwargs["flag"] is True
    assert inputs.head(9) is inputs
    assert inputs.next_layer([hidden]).side(0) is first
