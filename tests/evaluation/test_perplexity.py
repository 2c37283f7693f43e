"""Perplexity scored in chunks of positions equals the plain full-logits computation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from toolkit.evaluation import perplexity as evaluate
from toolkit.evaluation.perplexity import perplexity
from toolkit.models.load import load_model
from toolkit.models.sources import TINY_FAMILIES


def _reference(model: torch.nn.Module, windows: torch.Tensor, batch_size: int = 4) -> float:
    """The former implementation: full float32 logits of a batch of windows at once."""
    nlls: list[float] = []
    with torch.no_grad():
        for start in range(0, windows.shape[0], batch_size):
            batch = windows[start : start + batch_size]
            logits = model(input_ids=batch, use_cache=False).logits[:, :-1].float()
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="none")
            nlls.extend(loss.view(batch.shape[0], -1).mean(dim=1).tolist())
    return math.exp(sum(nlls) / len(nlls))


def _windows(num: int = 6, seq: int = 48) -> torch.Tensor:
    return torch.randint(0, 256, (num, seq), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_chunked_perplexity_equals_full_logits(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_model(f"tiny-{family}").model
    monkeypatch.setattr(evaluate, "LOGIT_CHUNK_BYTES", 257 * 4 * 7)  # 7 positions a chunk: windows straddle chunks
    windows = _windows()
    assert perplexity(model, windows, torch.device("cpu")) == pytest.approx(_reference(model, windows), rel=1e-6)


def test_final_logit_softcapping_is_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_model("tiny-gemma3").model
    model.config.final_logit_softcapping = 0.5  # small: capping changes the loss a lot
    windows = _windows()
    value = perplexity(model, windows, torch.device("cpu"))
    assert value == pytest.approx(_reference(model, windows), rel=1e-6)
    model.config.final_logit_softcapping = None
    assert value != pytest.approx(_reference(model, windows), rel=1e-3)


def test_a_head_that_is_not_lm_head_falls_back_to_the_models_own_forward(caplog: pytest.LogCaptureFixture) -> None:
    """Llama ignores final_logit_softcapping; applying it would be wrong, and the check notices."""
    model = load_model("tiny-llama").model
    model.config.final_logit_softcapping = 0.5
    windows = _windows()
    assert perplexity(model, windows, torch.device("cpu")) == pytest.approx(_reference(model, windows), rel=1e-6)
    assert "one window at a time" in caplog.text
