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


def test_a_teacher_with_another_vocabulary_and_bad_settings_are_refused() -> None:
    with pytest.raises(ToolkitError, match="share the tokenizer"):
        kd_loss(torch.zeros(2, 4), torch.zeros(10, 4), torch.zeros(2, 4), torch.zeros(11, 4))
    for args, message in ((("kl", 2.0), "unknown --loss"), (("kd", 0.0), "temperature"), (("kd", 1.0, 0), "chunk")):
        with pytest.raises(ToolkitError, match=message):
            check_kd(*args)  # type: ignore[arg-type]
