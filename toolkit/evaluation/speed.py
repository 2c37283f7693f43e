"""Decode speed: greedy tokens per second of one model at batch 1, on the run's device.

Used to say what a structured (block-scope) compression bought: the dense model is measured
before it is pruned and the shrunk model after, in the same process, on the same device, with
the same prompt, so the two numbers compare (and two full models are never held at once). A
model pruned without changing its shapes (masks, quantization stored dense) decodes at the dense
speed, so it is not measured.

The measurement: a warm-up decode of :data:`WARMUP_TOKENS`, then :data:`REPEATS` greedy decodes
of exactly ``new_tokens`` tokens after the prompt (argmax at each step, KV cache on, no stop at
EOS) with :func:`toolkit.evaluation.generate.greedy_ids`; the result is the median of the
repeats' tokens per second of wall time, the prompt's prefill included (a short prompt: it is
one forward pass of :data:`PROMPT_TOKENS` tokens).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch
from torch import nn

from toolkit.errors import ToolkitError
from toolkit.evaluation.generate import greedy_ids

NEW_TOKENS = 32  # tokens decoded per repeat
PROMPT_TOKENS = 16  # tokens of the prompt (cut from the first calibration window)
REPEATS = 3
WARMUP_TOKENS = 2
BATCH = 1


def decode_tokens_per_s(model: nn.Module, prompt: Sequence[int], device: torch.device | str, *,
                        new_tokens: int = NEW_TOKENS, repeats: int = REPEATS) -> float:
    """Median tokens/s of greedy decoding ``new_tokens`` tokens after ``prompt`` at batch 1 on ``device``.

    The model is moved to ``device`` for the measurement and back to where it was, in eval mode
    (its mode is restored). Nothing of the model is changed. Raises :class:`ToolkitError` for an
    empty prompt or ``new_tokens``/``repeats`` < 1.
    """
    if not prompt:
        raise ToolkitError("the speed prompt is empty: give at least one token")
    if new_tokens < 1 or repeats < 1:
        raise ToolkitError(f"new tokens and repeats must be ≥ 1, got {new_tokens} and {repeats}")
    target = torch.device(device)
    home = next(model.parameters()).device
    was_training = model.training
    rates = []
    try:
        model.to(target)  # inside the try: a model that does not fit goes back home whole
        model.eval()
        greedy_ids(model, prompt, WARMUP_TOKENS)  # kernels chosen, caches touched: not timed
        for _ in range(repeats):
            _sync(target)
            start = time.perf_counter()
            new, _ = greedy_ids(model, prompt, new_tokens)  # no stop id: exactly new_tokens tokens
            _sync(target)
            rates.append(len(new) / (time.perf_counter() - start))
    finally:
        model.to(home)
        model.train(was_training)
    return float(statistics.median(rates))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
