"""Perplexity under the protocol of docs/architecture.md.

The test text is tokenized once and cut into non-overlapping windows of ``seq_len`` tokens (the
remainder is dropped; see :func:`toolkit.data.text.eval_windows` for the picture). Inside a window
every token but the first is predicted from the tokens before it::

    window:   t0  t1  t2 … t(L-1)
    predicts:     t1  t2 … t(L-1)     (L − 1 predictions, none across windows)

ppl = exp(mean over windows of the window's mean NLL), the SparseGPT / Wanda convention.

Memory: float32 logits over the whole vocabulary are the largest tensor of an evaluation (Gemma's
262k vocabulary × 1024 positions × 4 windows is 4 GiB, plus copies). So the model's base runs on a
batch of windows to its final hidden states, and the output head (with Gemma-2's final logit
soft-capping) scores chunks of at most ``LOGIT_CHUNK_BYTES`` of logits at a time. The first batch
checks that head against the model's own logits (``logits_to_keep``) on its first window; a model
whose head does more than ``lm_head`` and soft-capping is then scored one window at a time through
its own forward instead.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.errors import NumericalError, RunCancelled
from toolkit.runtime.memory import keep_freed_memory

log = logging.getLogger(__name__)

LOGIT_CHUNK_BYTES = 64 * 2**20  # float32 logits scored at once (a 262k vocabulary: 64 positions)
_CHECKED_POSITIONS = 8  # last positions of the first window compared with the model's own logits


def perplexity(
    model: nn.Module,
    windows: Tensor,
    device: torch.device,
    batch_size: int = 4,
    progress: Callable[[int, int], None] = lambda done, total: None,
    cancelled: Callable[[], bool] = lambda: False,
) -> float:
    """exp(mean window NLL) of ``model`` on ``windows`` (num, seq) int64.

    Moves the model to ``device`` for the duration and back. Calls ``progress(done, total)`` with 0
    before the first batch and after each batch. Raises :class:`NumericalError` on a non-finite loss
    and :class:`RunCancelled` when ``cancelled()`` turns true.
    """
    keep_freed_memory()
    home = next(model.parameters()).device
    model.to(device)
    nlls: list[float] = []
    split = _split_head(model)
    try:
        progress(0, windows.shape[0])  # the stage starts now: a progress bar opens before the first batch
        with torch.no_grad():
            for start in range(0, windows.shape[0], batch_size):
                if cancelled():
                    raise RunCancelled("cancelled")
                batch = windows[start : start + batch_size].to(device)
                if split is not None and start == 0 and not _head_matches(model, *split, batch[:1]):
                    log.warning("%s: the output head is not lm_head (+ soft-capping); scoring one window at a time "
                                "through the model's own forward", type(model).__name__)
                    split = None
                nlls.extend((_window_nlls(model, *split, batch) if split is not None
                             else _own_window_nlls(model, batch)).tolist())
                progress(min(start + batch_size, windows.shape[0]), windows.shape[0])
    finally:
        model.to(home)
    return perplexity_of(nlls)


def perplexity_of(nlls: list[float]) -> float:
    """exp(mean of the windows' NLLs); :class:`NumericalError` when the mean is not finite."""
    mean = sum(nlls) / len(nlls)
    if not math.isfinite(mean):
        raise NumericalError("the loss is not finite: the model produces NaN/Inf logits")
    return math.exp(mean)


def _split_head(model: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """(base model, output head) of a transformers causal LM, or None when it has no such split."""
    base = getattr(model, getattr(model, "base_model_prefix", ""), None)
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if not isinstance(base, nn.Module) or base is model or not isinstance(head, nn.Module):
        return None
    return base, head


def _final_hidden(base: nn.Module, batch: Tensor) -> Tensor:
    """The base model's last hidden states (batch, seq, hidden), final norm applied."""
    out = base(input_ids=batch, use_cache=False)
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def _head_logits(model: nn.Module, head: nn.Module, hidden: Tensor) -> Tensor:
    """Logits of ``hidden`` (…, hidden) as the model's forward computes them, in the model's dtype."""
    logits = head(hidden)
    cap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)
    if cap is not None:  # Gemma-2 (and configs that set it): cap · tanh(logits / cap)
        logits = torch.tanh(logits / cap) * cap
    return logits


def _head_matches(model: nn.Module, base: nn.Module, head: nn.Module, window: Tensor) -> bool:
    """Whether ``_head_logits`` equals the model's own logits on the last positions of ``window`` (1, seq)."""
    keep = min(_CHECKED_POSITIONS, window.shape[1])
    hidden = _final_hidden(base, window)
    try:
        own = model(input_ids=window, use_cache=False, logits_to_keep=keep).logits[:, -keep:]
    except TypeError:  # a model without logits_to_keep: one window's full logits, once
        own = model(input_ids=window, use_cache=False).logits[:, -keep:]
    ours = _head_logits(model, head, hidden[:, -keep:])
    scale = float(own.float().abs().max()) or 1.0
    return own.shape == ours.shape and float((own.float() - ours.float()).abs().max()) <= 1e-4 * scale


def _window_nlls(model: nn.Module, base: nn.Module, head: nn.Module, batch: Tensor) -> Tensor:
    """Mean NLL per window (batch,): the base's final hidden states, then the head over chunks of positions."""
    hidden = _final_hidden(base, batch)  # (batch, seq, hidden)
    width = hidden.shape[-1]
    flat = hidden[:, :-1].reshape(-1, width)  # (batch·(seq−1), hidden)
    targets = batch[:, 1:].reshape(-1)
    weight = getattr(head, "weight", None)
    vocab = weight.shape[0] if isinstance(weight, Tensor) else int(getattr(model, "config").vocab_size)  # noqa: B009
    rows = max(1, LOGIT_CHUNK_BYTES // (4 * vocab))
    losses = torch.empty(flat.shape[0], dtype=torch.float32, device=flat.device)
    for first in range(0, flat.shape[0], rows):
        logits = _head_logits(model, head, flat[first : first + rows]).float()  # (rows, vocab)
        losses[first : first + rows] = F.cross_entropy(logits, targets[first : first + rows], reduction="none")
        del logits
    return losses.view(batch.shape[0], -1).mean(dim=1)


def _own_window_nlls(model: nn.Module, batch: Tensor) -> Tensor:
    """Mean NLL per window through the model's own forward, one window at a time."""
    means = []
    for window in batch.split(1):
        logits = model(input_ids=window, use_cache=False).logits[0, :-1].float()  # (seq−1, vocab)
        means.append(F.cross_entropy(logits, window[0, 1:], reduction="mean"))
    return torch.stack(means)
