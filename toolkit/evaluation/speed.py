"""Prefill and decode speed of one or more models at given batch sizes, on one device, in their own dtype.

One harness serves the run and ``python -m toolkit measure``. A run says what a structured (block-scope)
compression bought: the dense model is measured before it is pruned and the shrunk model after, in the
same process, on the same device, with the same prompt, so the numbers compare (and two full models are
never held at once). A model pruned without changing its shapes (masks, quantization stored dense)
computes exactly what the dense one does, so the run does not measure it. ``measure`` holds the
compressed model and its dense source together and interleaves their repeats.

One pass at batch B: the prompt of P tokens repeated in B rows runs once with the KV cache on (the
prefill, which also gives the first new token), then N − 1 single-token steps follow (the decode),
argmax at each step, no stop at EOS. Measured per pass, in seconds of wall time (CUDA synchronised):

- ``prefill_tokens_per_s`` = B · P / prefill seconds;
- ``decode_tokens_per_s`` = B · (N − 1) / decode seconds (the cached steps alone);
- ``tokens_per_s`` = N / (prefill + decode seconds): new tokens per second of one row with its prefill
  (at batch 1 the greedy-generation rate the run has always recorded).

A warm-up pass of :data:`WARMUP_TOKENS` new tokens per batch size comes first (kernels chosen, caches
touched: not timed); then :data:`REPEATS` passes, and each figure is the median over the repeats. With
several models the repeats alternate between them, the order reversed every round, so a neighbour's
load on a shared machine falls on each model alike. Every model is moved to the device for its passes
and back to where it was, its training mode restored; nothing of it is changed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
from torch import nn

from toolkit.errors import ToolkitError
from toolkit.evaluation.generate import context_limit

NEW_TOKENS = 32  # tokens decoded per repeat
PROMPT_TOKENS = 16  # tokens of a run's prompt (cut from the first calibration window)
REPEATS = 3
WARMUP_TOKENS = 2
BATCH = 1  # the batch of a run's headline figure (``tokens_per_s``)
BATCHES = (1, 8)  # the batch sizes measured


@dataclass(frozen=True)
class Throughput:
    """Median speeds of one model at one batch size (see the module docstring for each figure)."""

    batch: int
    prompt_tokens: int
    new_tokens: int
    repeats: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    tokens_per_s: float

    def to_dict(self) -> dict[str, float | int]:
        """Plain data (result.json, ``measure --json``)."""
        return asdict(self)


def check_speed_args(batches: Sequence[int], new_tokens: int, repeats: int, prompt_tokens: int = 1) -> None:
    """Raise :class:`ToolkitError` unless batches, ``repeats``, ``prompt_tokens`` are ≥ 1 and ``new_tokens`` ≥ 2."""
    if not batches or min(batches) < 1:
        raise ToolkitError(f"batch sizes must be ≥ 1, got {list(batches)}; e.g. 1,8")
    if new_tokens < 2:
        raise ToolkitError(f"new tokens must be ≥ 2 (the first comes from the prefill), got {new_tokens}")
    if repeats < 1 or prompt_tokens < 1:
        raise ToolkitError(f"repeats and prompt tokens must be ≥ 1, got {repeats} and {prompt_tokens}")


def compare(models: Sequence[nn.Module], prompt: Sequence[int], device: torch.device | str, *,
            batches: Sequence[int] = BATCHES, new_tokens: int = NEW_TOKENS,
            repeats: int = REPEATS) -> list[list[Throughput]]:
    """Each model's :class:`Throughput` at each of ``batches`` (``result[model][batch index]``), repeats interleaved.

    Every model must fit on ``device`` at once. The prompt is cut from the left so prompt + new tokens
    fit each model's context. Raises :class:`ToolkitError` for an empty prompt or bad counts
    (:func:`check_speed_args`); ``torch.OutOfMemoryError`` passes through, every model back where it was.
    """
    if not prompt:
        raise ToolkitError("the speed prompt is empty: give at least one token")
    check_speed_args(batches, new_tokens, repeats)
    target = torch.device(device)
    keep = max(1, min(context_limit(m) for m in models) - new_tokens)
    ids = torch.tensor([list(prompt)[-keep:]], dtype=torch.long)
    homes = [(next(m.parameters()).device, m.training) for m in models]
    try:
        for model in models:  # inside the try: a model that does not fit goes back home whole
            model.to(target).eval()
        return _measure(models, ids, target, batches, new_tokens, repeats)
    finally:
        for model, (home, training) in zip(models, homes, strict=True):
            model.to(home).train(training)


def _measure(models: Sequence[nn.Module], ids: torch.Tensor, device: torch.device, batches: Sequence[int],
             new_tokens: int, repeats: int) -> list[list[Throughput]]:
    """Warm-up, then ``repeats`` rounds over the models (order reversed every round), per batch size."""
    timings: list[list[list[tuple[float, float]]]] = [[[] for _ in batches] for _ in models]
    for b, batch in enumerate(batches):
        for model in models:
            _pass(model, ids, device, batch, WARMUP_TOKENS)
        for round_ in range(repeats):
            order = range(len(models)) if round_ % 2 == 0 else reversed(range(len(models)))
            for m in order:
                timings[m][b].append(_pass(models[m], ids, device, batch, new_tokens))
    return [[_summary(timings[m][b], batch, ids.shape[1], new_tokens) for b, batch in enumerate(batches)]
            for m in range(len(models))]


def _summary(timings: list[tuple[float, float]], batch: int, prompt_tokens: int, new_tokens: int) -> Throughput:
    """Medians of the rates of ``timings`` ((prefill seconds, decode seconds) per repeat)."""
    prefill = [batch * prompt_tokens / p for p, _ in timings]
    decode = [batch * (new_tokens - 1) / d for _, d in timings]
    whole = [new_tokens / (p + d) for p, d in timings]
    return Throughput(batch, prompt_tokens, new_tokens, len(timings), float(statistics.median(prefill)),
                      float(statistics.median(decode)), float(statistics.median(whole)))


def _pass(model: nn.Module, ids: torch.Tensor, device: torch.device, batch: int,
          new_tokens: int) -> tuple[float, float]:
    """(prefill seconds, decode seconds) of one greedy pass of ``new_tokens`` tokens at ``batch`` rows."""
    inputs = ids.to(device).expand(batch, -1).contiguous()  # (batch, P): the same prompt in every row
    with torch.no_grad():
        _sync(device)
        start = time.perf_counter()
        out = model(input_ids=inputs, use_cache=True)
        token = out.logits[:, -1].argmax(-1, keepdim=True)  # (batch, 1)
        _sync(device)
        prefilled = time.perf_counter()
        past = out.past_key_values
        for _ in range(new_tokens - 1):
            out = model(input_ids=token, past_key_values=past, use_cache=True)
            past = out.past_key_values
            token = out.logits[:, -1].argmax(-1, keepdim=True)
        _sync(device)
        done = time.perf_counter()
    return prefilled - start, done - prefilled


def decode_tokens_per_s(model: nn.Module, prompt: Sequence[int], device: torch.device | str, *,
                        new_tokens: int = NEW_TOKENS, repeats: int = REPEATS) -> float:
    """Median greedy tokens/s, prefill included, of ``new_tokens`` tokens after ``prompt`` at batch 1 on ``device``.

    :func:`compare` of the one model at batch 1 (its ``tokens_per_s``); nothing of the model is changed.
    """
    return compare([model], prompt, device, batches=(1,), new_tokens=new_tokens, repeats=repeats)[0][0].tokens_per_s


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
