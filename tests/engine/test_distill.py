"""The chunked distillation loss (toolkit/engine/distill.py) against the plain KL, and training with it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from toolkit.engine.distill import check_kd, kd_loss
from toolkit.errors import ToolkitError


def _plain(hs: torch.Tensor, ws: torch.Tensor, ht: torch.Tensor, wt: torch.Tensor, temperature: float) -> torch.Tensor:
    log_ps = F.log_softmax(hs @ ws.T / temperature, dim=-1)
    log_pt = F.log_softmax(ht @ wt.T / temperature, dim=-1)
    return F.kl_div(log_ps, log_pt, log_target=True, reduction="batchmean") * temperature**2


@pytest.mark.parametrize(("chunk", "temperature"), [(1, 1.0), (7, 2.0), (50, 0.5), (64, 3.0)])
def test_the_chunked_loss_and_its_gradient_equal_the_plain_kl(chunk: int, temperature: float) -> None:
    gen = torch.Generator().manual_seed(0)
    hs, ws = torch.randn(12, 16, generator=gen), torch.randn(50, 16, generator=gen)
    ht, wt = torch.randn(12, 16, generator=gen), torch.randn(50, 16, generator=gen)
    a, b = hs.clone().requires_grad_(), hs.clone().requires_grad_()
    got = kd_loss(a, ws, ht, wt, temperature=temperature, chunk=chunk)
    want = _plain(b, ws, ht, wt, temperature)
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-5)
    got.backward()
    want.backward()
    assert a.grad is not None and b.grad is not None
    assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-6)


def test_the_loss_is_zero_for_the_teacher_itself_and_positive_otherwise() -> None:
    gen = torch.Generator().manual_seed(1)
    h, w = torch.randn(5, 8, generator=gen), torch.randn(20, 8, generator=gen)
    assert float(kd_loss(h, w, h, w, chunk=6)) == pytest.approx(0.0, abs=1e-6)
    assert float(kd_loss(h * 0.5, w, h, w, chunk=6)) > 0


def test_gradient_steps_lower_the_kl_to_the_teacher() -> None:
    gen = torch.Generator().manual_seed(2)
    ht, w = torch.randn(10, 8, generator=gen), torch.randn(30, 8, generator=gen)
    student = torch.zeros(10, 8, requires_grad=True)
    optimizer = torch.optim.SGD([student], lr=0.5)
    losses = []
    for _ in range(20):
        loss = kd_loss(student, w, ht, w, chunk=7)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]


def test_the_lm_loss_from_chunks_is_the_cross_entropy() -> None:
    from toolkit.engine.distill import lm_loss

    gen = torch.Generator().manual_seed(4)
    hidden, head = torch.randn(9, 8, generator=gen), torch.randn(30, 8, generator=gen)
    targets = torch.randint(0, 30, (9,), generator=gen)
    assert float(lm_loss(hidden, head, targets, chunk=7)) == pytest.approx(
        float(F.cross_entropy(hidden @ head.T, targets)), rel=1e-5)


def test_a_teacher_with_another_vocabulary_and_bad_settings_are_refused() -> None:
    with pytest.raises(ToolkitError, match="share the tokenizer"):
        kd_loss(torch.zeros(2, 4), torch.zeros(10, 4), torch.zeros(2, 4), torch.zeros(11, 4))
    for args, message in ((("kl", 2.0), "unknown --loss"), (("kd", 0.0), "temperature"), (("kd", 1.0, 0), "chunk")):
        with pytest.raises(ToolkitError, match=message):
            check_kd(*args)  # type: ignore[arg-type]


def test_kd_recovery_of_a_pruned_tiny_model_lowers_the_kl_and_keeps_pruned_weights_zero() -> None:
    from toolkit.engine.distill import hidden_states, step_loss
    from toolkit.engine.finetune import TrainSettings, train
    from toolkit.engine.lora import add_masked_lora, linear_names, merge_masked_lora, pruned_entries_nonzero
    from toolkit.models.layers import get_weight
    from toolkit.models.load import load_model

    teacher, student = load_model("tiny-llama").model, load_model("tiny-llama").model
    masks = {}
    with torch.no_grad():
        for module in linear_names(student):  # magnitude 70 % per linear: a pruned student
            weight = get_weight(module)
            keep = weight.abs() >= weight.abs().flatten().quantile(0.7)
            weight[~keep] = 0
            masks[module] = keep
    torch.manual_seed(0)
    windows = torch.randint(0, 256, (16, 24), generator=torch.Generator().manual_seed(3))

    def kl() -> float:
        with torch.no_grad():
            hs, ws = hidden_states(student, windows)
            ht, wt = hidden_states(teacher, windows)
            return float(kd_loss(hs.reshape(-1, hs.shape[-1]), ws, ht.reshape(-1, ht.shape[-1]), wt,
                                 temperature=1.0, chunk=100))

    before = kl()
    with torch.no_grad():  # the LM loss from the chunks is transformers' own, and kd+lm their sum
        lm = float(step_loss(teacher, "lm", chunk=100)(student, windows[:2]))
        assert lm == pytest.approx(float(student(input_ids=windows[:2], labels=windows[:2]).loss), rel=1e-4)
        both = float(step_loss(teacher, "kd+lm", temperature=1.0, chunk=100)(student, windows[:2]))
        assert both == pytest.approx(lm + float(step_loss(teacher, "kd", temperature=1.0)(student, windows[:2])),
                                     rel=1e-5)
    peft_model = add_masked_lora(student, masks, rank=4, alpha=8.0)
    settings = TrainSettings(steps=8, batch_size=2, lr=3e-3,
                             loss_fn=step_loss(teacher, "kd", temperature=1.0, chunk=100))
    result = train(peft_model, windows, settings, torch.device("cpu"), lambda event: None, lambda: False)
    student = merge_masked_lora(peft_model)
    assert len(result.losses) == 8 and kl() < 0.95 * before  # measured 0.00266 → 0.00230
    assert pruned_entries_nonzero(student, masks) == 0
