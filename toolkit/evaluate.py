"""Perplexity under the protocol of DESIGN.md.

The test text is tokenized once and cut into non-overlapping windows of ``seq_len`` tokens (the
remainder is dropped; see :func:`toolkit.data.eval_windows` for the picture). Inside a window
every token but the first is predicted from the tokens before it::

    window:   t0  t1  t2 … t(L-1)
    predicts:     t1  t2 … t(L-1)     (L − 1 predictions, none across windows)

ppl = exp(mean over windows of the window's mean NLL), the SparseGPT / Wanda convention.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.errors import NumericalError, RunCancelled
from toolkit.memory import keep_freed_memory


def perplexity(
    model: nn.Module,
    windows: Tensor,
    device: torch.device,
    batch_size: int = 4,
    progress: Callable[[int, int], None] = lambda done, total: None,
    cancelled: Callable[[], bool] = lambda: False,
) -> float:
    """exp(mean window NLL) of ``model`` on ``windows`` (num, seq) int64.

    Moves the model to ``device`` for the duration and back. Raises :class:`NumericalError` on a
    non-finite loss and :class:`RunCancelled` when ``cancelled()`` turns true.
    """
    keep_freed_memory()
    home = next(model.parameters()).device
    model.to(device)
    nlls: list[float] = []
    try:
        with torch.no_grad():
            for start in range(0, windows.shape[0], batch_size):
                if cancelled():
                    raise RunCancelled("cancelled")
                batch = windows[start : start + batch_size].to(device)
                logits = model(input_ids=batch, use_cache=False).logits[:, :-1].float()
                loss = F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="none"
                ).view(batch.shape[0], -1)
                nlls.extend(loss.mean(dim=1).tolist())
                progress(min(start + batch_size, windows.shape[0]), windows.shape[0])
    finally:
        model.to(home)
    mean = sum(nlls) / len(nlls)
    if not math.isfinite(mean):
        raise NumericalError("the loss is not finite: the model produces NaN/Inf logits")
    return math.exp(mean)
