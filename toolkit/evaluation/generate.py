"""Greedy text generation, and dense-vs-pruned side-by-side records for a few fixed prompts.

Greedy decoding (argmax at every step, no sampling, no chat template) is deterministic for a
given model, device and dtype, so two calls give the same text and a dense and a pruned model
can be compared token by token. The model prunes in place, so the caller generates the dense
texts first, prunes, generates again and pairs them with :func:`side_by_side`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from toolkit.errors import ToolkitError
from toolkit.models.tokenizers import ByteCodec, TextCodec

DEFAULT_PROMPTS = (
    "The capital of France is",
    "Water boils at a temperature of",
    "The three primary colors are",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
)
MAX_CONTEXT = 2048  # docs/architecture.md: cap the context at 2048 unless asked


@dataclass(frozen=True)
class Generation:
    """One greedy continuation of ``prompt``; ``stop`` is "eos", "max_new_tokens" or "until"."""

    prompt: str
    text: str
    prompt_tokens: int
    new_tokens: int
    seconds: float
    stop: str

    @property
    def tokens_per_s(self) -> float:
        """New tokens per second of wall time (prefill included)."""
        return self.new_tokens / self.seconds if self.seconds > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form, with ``tokens_per_s``."""
        return {**asdict(self), "tokens_per_s": self.tokens_per_s}


def encode_prompt(codec: TextCodec, text: str) -> list[int]:
    """Model input ids of ``text`` as lm-eval's HFLM makes them: the tokenizer's default special tokens.

    HF tokenizers add what their config says (BOS for Llama-2/Gemma, nothing for GPT-2-style);
    the byte codec of the tiny models adds nothing.
    """
    tokenizer = getattr(codec, "tokenizer", None)
    if tokenizer is not None:
        return list(tokenizer(text)["input_ids"])
    return codec.encode(text)


def decode(codec: TextCodec, ids: Sequence[int]) -> str:
    """Text of ``ids`` (special tokens dropped; invalid UTF-8 bytes of the byte codec replaced)."""
    tokenizer = getattr(codec, "tokenizer", None)
    if tokenizer is not None:
        return tokenizer.decode(list(ids), skip_special_tokens=True)
    return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def eos_id(codec: TextCodec) -> int | None:
    """The id that ends a generation: the tokenizer's EOS; the byte codec has none."""
    if isinstance(codec, ByteCodec):
        return None
    tokenizer = getattr(codec, "tokenizer", None)
    return getattr(tokenizer, "eos_token_id", None)


def context_limit(model: nn.Module) -> int:
    """Longest input the model takes: its position limit, capped at :data:`MAX_CONTEXT`."""
    config = getattr(model, "config", None)
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return min(value, MAX_CONTEXT)
    return MAX_CONTEXT


def greedy_ids(
    model: nn.Module, ids: Sequence[int], max_new_tokens: int, stop_id: int | None = None,
    done: Callable[[list[int]], bool] = lambda new: False,
) -> tuple[list[int], str]:
    """Greedy continuation of ``ids`` on the model's device with a KV cache; returns (new ids, stop).

    Stops after ``max_new_tokens``, at ``stop_id`` (not included) or when ``done(new_ids)``.
    The prompt is cut from the left so prompt + new tokens fit :func:`context_limit`.
    """
    device = next(model.parameters()).device
    keep = max(1, context_limit(model) - max_new_tokens)
    inputs = torch.tensor([list(ids)[-keep:]], dtype=torch.long, device=device)
    new: list[int] = []
    past = None
    with torch.no_grad():
        for _ in range(max_new_tokens):
            out = model(input_ids=inputs, past_key_values=past, use_cache=True)
            past = out.past_key_values
            token = int(out.logits[0, -1].argmax())
            if token == stop_id:
                return new, "eos"
            new.append(token)
            if done(new):
                return new, "until"
            inputs = torch.tensor([[token]], dtype=torch.long, device=device)
    return new, "max_new_tokens"


def generate(
    model: nn.Module, codec: TextCodec, prompts: Sequence[str], max_new_tokens: int = 64,
    device: torch.device | str = "cpu",
) -> list[Generation]:
    """Greedy continuation of each prompt, one at a time (tokens/s is per prompt).

    Moves the model to ``device`` for the duration and back. Raises :class:`ToolkitError` for
    ``max_new_tokens`` < 1 or a prompt that gives no token.
    """
    if max_new_tokens < 1:
        raise ToolkitError(f"max-new-tokens must be ≥ 1, got {max_new_tokens}")
    home = next(model.parameters()).device
    model.to(torch.device(device))
    was_training = model.training
    model.eval()
    results = []
    try:
        for prompt in prompts:
            ids = encode_prompt(codec, prompt)
            if not ids:
                raise ToolkitError("the prompt is empty: give some text with --prompt")
            start = time.perf_counter()
            new, stop = greedy_ids(model, ids, max_new_tokens, eos_id(codec))
            seconds = time.perf_counter() - start
            results.append(Generation(prompt, decode(codec, new), len(ids), len(new), seconds, stop))
    finally:
        model.to(home)
        model.train(was_training)
    return results


def protocol(codec: TextCodec, max_new_tokens: int, device: torch.device | str, model: nn.Module) -> dict[str, Any]:
    """How the texts were made, to stamp beside them (``--json``)."""
    dtype = next(model.parameters()).dtype
    return {"decoding": "greedy", "sampling": False, "chat_template": False, "max_new_tokens": max_new_tokens,
            "tokenizer": codec.name, "device": str(device), "dtype": str(dtype).removeprefix("torch."),
            "max_context": context_limit(model), "torch": torch.__version__}


def side_by_side(dense: Sequence[Generation], pruned: Sequence[Generation]) -> list[dict[str, Any]]:
    """One record per prompt: dense and pruned text, tokens/s, and where the texts first differ.

    ``first_difference`` is the character index of the first mismatch (None when identical).
    Raises :class:`ToolkitError` when the two lists are not for the same prompts.
    """
    if [g.prompt for g in dense] != [g.prompt for g in pruned]:
        raise ToolkitError("dense and pruned generations are for different prompts: generate both from one list")
    records = []
    for d, p in zip(dense, pruned, strict=True):
        diff = next((i for i, (a, b) in enumerate(zip(d.text, p.text, strict=False)) if a != b), None)
        if diff is None and len(d.text) != len(p.text):
            diff = min(len(d.text), len(p.text))
        records.append({"prompt": d.prompt, "dense": d.text, "pruned": p.text, "identical": d.text == p.text,
                        "first_difference": diff, "dense_tokens_per_s": d.tokens_per_s,
                        "pruned_tokens_per_s": p.tokens_per_s})
    return records


def compare_models(
    dense: nn.Module, pruned: nn.Module, codec: TextCodec, prompts: Sequence[str] = DEFAULT_PROMPTS,
    max_new_tokens: int = 32, device: torch.device | str = "cpu",
) -> list[dict[str, Any]]:
    """:func:`side_by_side` records for two models that share ``codec`` (e.g. dense and a saved pruned one)."""
    return side_by_side(generate(dense, codec, prompts, max_new_tokens, device),
                        generate(pruned, codec, prompts, max_new_tokens, device))
