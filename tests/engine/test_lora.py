"""Masked LoRA (toolkit/engine/lora.py) and the recovery loop (toolkit/engine/finetune.py) on tiny models.

The contract: the effective weight W + (s·B A) ⊙ M is what the layer computes with; every weight the
keep-mask drops is exactly 0 after every step and after the merge; the loss falls on a seeded run.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from toolkit.engine.finetune import TrainSettings, learning_rate, train, warmup_steps
from toolkit.engine.lora import (
    MaskedLoraLinear,
    add_masked_lora,
    check_masks,
    check_rank,
    linear_names,
    masked_layers,
    merge_masked_lora,
    pruned_entries_nonzero,
)
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import RecoveryStep
from toolkit.models.layers import get_weight, set_weight_
from toolkit.models.load import load_model


def _pruned(family: str = "tiny-llama", seed: int = 0) -> tuple[nn.Module, dict[nn.Module, torch.Tensor]]:
    """A tiny model with half of every decoder linear's weights zeroed by a random keep-mask."""
    model = load_model(family).model
    generator = torch.Generator().manual_seed(seed)
    masks = {}
    for module in linear_names(model):
        weight = get_weight(module)
        keep = torch.rand(weight.shape, generator=generator) < 0.5
        set_weight_(module, weight * keep)
        masks[module] = keep
    return model, masks


def _windows(count: int = 8, seq: int = 32, seed: int = 0) -> torch.Tensor:
    """Byte windows of a repetitive text: a tiny random model can learn it in a few steps."""
    text = ("the cat sat on the mat. " * 200).encode()
    starts = torch.randint(0, len(text) - seq, (count,), generator=torch.Generator().manual_seed(seed))
    return torch.stack([torch.tensor(list(text[s: s + seq])) for s in starts.tolist()])


def _randomize_adapters(model: nn.Module, seed: int = 1) -> None:
    """Give B (zero at the start) random values, so the update is not trivially zero."""
    generator = torch.Generator().manual_seed(seed)
    for layer in masked_layers(model):
        weight = layer.lora_B["default"].weight
        weight.data = torch.randn(weight.shape, generator=generator)


def test_the_update_is_masked_in_the_forward_and_the_merge() -> None:
    model, masks = _pruned()
    peft_model = add_masked_lora(model, masks, rank=4, alpha=8.0)
    _randomize_adapters(peft_model)
    layer = next(masked_layers(peft_model))
    base, keep = layer.get_base_layer(), masks[layer.get_base_layer()]
    A, B = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    expected = get_weight(base) + torch.where(keep, 2.0 * (B @ A), 0.0)  # s = alpha / rank = 2
    assert torch.equal(layer.effective_weight(), expected)
    assert torch.count_nonzero(layer.effective_weight()[~keep]) == 0
    assert torch.count_nonzero(layer.effective_weight()[keep]) == int(keep.sum())  # the kept weights moved
    x = torch.randn(3, 5, base.in_features)
    assert torch.allclose(layer(x), F.linear(x, expected, base.bias), atol=1e-5)
    assert pruned_entries_nonzero(peft_model, masks) == 0
    merged = merge_masked_lora(peft_model)
    assert not list(masked_layers(merged))
    assert torch.allclose(get_weight(base), expected, atol=1e-6)
    assert pruned_entries_nonzero(merged, masks) == 0


def test_conv1d_layers_are_masked_in_their_storage_layout() -> None:
    model, masks = _pruned("tiny-gpt2")
    peft_model = add_masked_lora(model, masks, rank=4, alpha=4.0)
    _randomize_adapters(peft_model)
    layers = list(masked_layers(peft_model))
    assert len(layers) == len(masks) and type(layers[0].get_base_layer()).__name__ == "Conv1D"
    before = {layer.get_base_layer(): layer.effective_weight().detach().clone() for layer in layers}
    merged = merge_masked_lora(peft_model)
    for module, weight in before.items():
        assert torch.allclose(get_weight(module), weight, atol=1e-6)  # (out, in), whatever the storage
    assert pruned_entries_nonzero(merged, masks) == 0


def test_masks_are_kept_after_every_step_and_the_loss_falls() -> None:
    model, masks = _pruned()
    torch.manual_seed(0)
    peft_model = add_masked_lora(model, masks, rank=4, alpha=8.0)
    stray_per_step: list[int] = []

    def check(event: object) -> None:
        if isinstance(event, RecoveryStep):
            stray_per_step.append(pruned_entries_nonzero(peft_model, masks))

    settings = TrainSettings(steps=12, batch_size=2, lr=1e-2)
    result = train(peft_model, _windows(24), settings, torch.device("cpu"), check, lambda: False)
    assert stray_per_step == [0] * 12
    assert len(result.losses) == 12 and result.seconds > 0
    first, last = sum(result.losses[:3]) / 3, sum(result.losses[-3:]) / 3
    assert last < first - 0.1, result.losses
    merged = merge_masked_lora(peft_model)
    assert pruned_entries_nonzero(merged, masks) == 0
    assert not merged.training  # back in eval mode


def test_a_seeded_run_repeats_exactly() -> None:
    losses = []
    for _ in range(2):
        model, masks = _pruned()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(3)
            peft_model = add_masked_lora(model, masks, rank=2, alpha=2.0)
            result = train(peft_model, _windows(6), TrainSettings(steps=3, batch_size=2, lr=1e-2),
                           torch.device("cpu"), lambda event: None, lambda: False)
        losses.append(result.losses)
    assert losses[0] == losses[1]


def test_train_stops_at_the_next_step_when_cancelled() -> None:
    model, masks = _pruned()
    peft_model = add_masked_lora(model, masks, rank=2, alpha=2.0)
    seen: list[RecoveryStep] = []
    with pytest.raises(RunCancelled):
        train(peft_model, _windows(20), TrainSettings(steps=10, batch_size=2, lr=1e-3), torch.device("cpu"),
              seen.append, lambda: len(seen) >= 2)
    assert [e.step for e in seen] == [1, 2]


def test_learning_rate_warms_up_then_decays() -> None:
    settings = TrainSettings(steps=20, batch_size=1, lr=1.0)
    rates = [learning_rate(step, settings) for step in range(1, 21)]
    assert warmup_steps(20) == 2 and rates[:2] == [0.5, 1.0]
    assert rates[2:] == sorted(rates[2:], reverse=True) and rates[-1] == pytest.approx(1 / 19)
    assert learning_rate(1, TrainSettings(steps=1, batch_size=1, lr=0.1)) == pytest.approx(0.1)


def test_rank_larger_than_a_linear_is_refused_and_named() -> None:
    model = load_model("tiny-llama").model  # k_proj and v_proj are 32 × 64
    check_rank(model, 32)
    with pytest.raises(ToolkitError, match=r"--rank 33 is larger than min\(out, in\) = 32 of layer 0 "
                                           r"self_attn.k_proj \(32×64\): use --rank ≤ 32"):
        check_rank(model, 33)


def test_a_mask_that_drops_nonzero_weights_is_refused() -> None:
    model, masks = _pruned()
    module = next(iter(masks))
    masks[module] = masks[module].clone()
    masks[module][0, masks[module][0].nonzero()[0, 0]] = False  # drop a weight that is not zero
    with pytest.raises(ToolkitError, match=r"1 weights of layer 0 self_attn.q_proj that its keep-mask drops are "
                                           r"not zero"):
        check_masks(model, masks, "r1")


def test_the_layer_refuses_to_run_without_its_mask() -> None:
    model, masks = _pruned()
    peft_model = add_masked_lora(model, masks, rank=2, alpha=2.0)
    layer: MaskedLoraLinear = next(masked_layers(peft_model))
    layer.keep_mask = None
    with pytest.raises(RuntimeError, match="before its keep-mask was set"):
        layer.masked_delta()
