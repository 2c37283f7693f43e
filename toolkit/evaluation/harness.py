"""lm-eval adapters: our in-memory model as an lm-eval ``LM``, and a task over a local data folder.

:class:`CodecLM` scores the model and codec the caller holds (byte codec included), never
re-loading anything.

Why not ``HFLM(pretrained=model, tokenizer=...)``: HFLM needs a Hugging Face tokenizer, and the
tiny test models use :class:`toolkit.models.tokenizers.ByteCodec`. One small class serves every model
the toolkit loads, and HF models get HFLM's numbers: it subclasses lm-eval's ``TemplateLM``,
which does HFLM's context/continuation split (trailing spaces move to the continuation; the
pair is encoded whole and split at the context length; an empty context becomes the prefix
token), and scores like HFLM's ``_loglikelihood_tokens``::

    tokens  c0 c1 c2 c3 | k0 k1 k2        (context | continuation), left-truncated to max_length + 1
    input   c0 c1 c2 c3   k0 k1           (the last token is never an input)
    scored           c3 → k0, k0 → k1, k1 → k2   (log p of each continuation token, summed)

Answer choices share their context: it runs once (with ``logits_to_keep=1``) and all the
continuations run in one batch over its KV cache. Other requests run in batches of similar
length (longest first), right-padded with an attention mask, so padding never changes a score.
``tests/evaluation/test_zeroshot.py`` checks the scores by hand on every tiny family and the
loglikelihoods against HFLM on the same model.

:class:`LocalTask` is lm-eval's ``ConfigurableTask`` whose ``dataset_path`` is a local
``save_to_disk`` folder of the validation split (:func:`toolkit.evaluation.tasks.local_config`).

This module imports lm-eval at the top: import it only inside functions (:mod:`toolkit.evaluation.zeroshot` does).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.api.task import ConfigurableTask
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from torch import nn

from toolkit.errors import ToolkitError
from toolkit.evaluation.generate import context_limit, decode, encode_prompt, eos_id, greedy_ids
from toolkit.evaluation.tasks import load_local_split
from toolkit.models.tokenizers import TextCodec

log = logging.getLogger(__name__)
TOKENS_PER_BATCH = 2048  # padded tokens per forward pass: bounds the (batch, seq, vocab) logits in memory
Request = tuple[Any, list[int], list[int]]  # (strings, context ids, continuation ids)


class CodecLM(TemplateLM):
    """lm-eval model over ``model`` (on its current device) and ``codec``; greedy generation only."""

    def __init__(
        self, model: nn.Module, codec: TextCodec, batch_size: int = 8,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        super().__init__()
        self.model, self.codec, self.batch_size = model, codec, max(1, batch_size)
        self.max_length = context_limit(model)
        self.progress = progress or (lambda done, total: None)
        self.truncated = 0  # requests cut from the left to fit max_length
        # the context pass needs only its last position's logits (skips the LM head elsewhere)
        self._keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters

    @property
    def eot_token_id(self) -> int:
        """End-of-text id: the tokenizer's EOS (the byte codec's BOS, its only special id).

        A tokenizer with neither EOS nor BOS is an error here, where a request first needs one, never a guessed id.
        """
        eos = eos_id(self.codec)
        if eos is not None:
            return eos
        if self.codec.bos_id is None:
            raise ToolkitError(f"the tokenizer {self.codec.name!r} has neither an EOS nor a BOS token, which this "
                               "task needs to start an empty context or end a text: use the model's own tokenizer")
        return self.codec.bos_id

    @property
    def prefix_token_id(self) -> int:
        """Context of an empty-context request: BOS, else EOS (as HFLM)."""
        return self.codec.bos_id if self.codec.bos_id is not None else self.eot_token_id

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        """Ids of ``string``: the tokenizer's default special tokens unless told (as HFLM)."""
        tokenizer = getattr(self.codec, "tokenizer", None)
        if add_special_tokens is None or tokenizer is None:
            return encode_prompt(self.codec, string)
        return list(tokenizer(string, add_special_tokens=add_special_tokens)["input_ids"])

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """TemplateLM's context/continuation encoding, then :meth:`_loglikelihood_tokens` (no bar)."""
        return super().loglikelihood(requests, disable_tqdm=True)

    def _loglikelihood_tokens(self, requests: list[Request], disable_tqdm: bool = False,
                              **kwargs: Any) -> list[tuple[float, bool]]:
        """(sum log p(continuation | context), continuation is the greedy one) per request, in order.

        Requests that share a context (the answer choices of one question) run the context once
        and then all continuations in one batch over its KV cache; the others run in batches.
        """
        rows = [self._row(context, continuation) for _, context, continuation in requests]
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, (inp, cont) in enumerate(rows):
            groups.setdefault(tuple(inp[: len(inp) - len(cont) + 1]), []).append(i)
        shared = {prefix: members for prefix, members in groups.items() if len(members) > 1 and prefix}
        alone = sorted((i for prefix, members in groups.items() if prefix not in shared for i in members),
                       key=lambda i: -len(rows[i][0]))
        results: list[tuple[float, bool]] = [(0.0, False)] * len(requests)
        done = 0
        self.progress(0, len(requests))
        for prefix, members in shared.items():
            for i, score in zip(members, self._shared_prefix(prefix, [rows[i][1] for i in members]), strict=True):
                results[i] = score
            done += len(members)
            self.progress(done, len(requests))
        for batch in self._batches([len(rows[i][0]) for i in alone]):
            logits = self._logits([rows[alone[b]][0] for b in batch])
            for r, b in enumerate(batch):
                results[alone[b]] = _continuation_score(logits[r], len(rows[alone[b]][0]), rows[alone[b]][1])
            done += len(batch)
            self.progress(done, len(requests))
        return results

    def _shared_prefix(self, prefix: tuple[int, ...], continuations: list[list[int]]) -> list[tuple[float, bool]]:
        """Score continuations after one common prefix: one pass over it, one batched pass after it."""
        device = next(self.model.parameters()).device
        keep = {"logits_to_keep": 1} if self._keeps_logits else {}
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([prefix], device=device), use_cache=True, **keep)
            first = out.logits[0, -1:]
            suffixes = [c[:-1] for c in continuations]
            width = max(len(s) for s in suffixes)
            rest = None
            if width:
                past = out.past_key_values
                past.batch_repeat_interleave(len(suffixes))
                ids = torch.zeros((len(suffixes), width), dtype=torch.long)
                mask = torch.zeros((len(suffixes), len(prefix) + width), dtype=torch.long)
                mask[:, : len(prefix)] = 1
                for r, suffix in enumerate(suffixes):
                    ids[r, : len(suffix)] = torch.tensor(suffix, dtype=torch.long)
                    mask[r, len(prefix): len(prefix) + len(suffix)] = 1
                rest = self.model(input_ids=ids.to(device), attention_mask=mask.to(device), past_key_values=past,
                                  use_cache=True).logits
        scores = []
        for r, cont in enumerate(continuations):
            logits = first if rest is None else torch.cat([first, rest[r, : len(cont) - 1]])
            scores.append(_continuation_score(logits, len(cont), cont))
        return scores

    def _batches(self, widths: list[int]) -> list[list[int]]:
        """Consecutive inputs (longest first) while batch_size and the padded-token budget allow."""
        batches: list[list[int]] = []
        for i in range(len(widths)):
            if batches and len(batches[-1]) < self.batch_size and \
                    (len(batches[-1]) + 1) * widths[batches[-1][0]] <= TOKENS_PER_BATCH:
                batches[-1].append(i)
            else:
                batches.append([i])
        return batches

    def _row(self, context: list[int], continuation: list[int]) -> tuple[list[int], list[int]]:
        if len(context) + len(continuation) > self.max_length + 1:
            if not self.truncated:
                log.warning("context + continuation longer than %d tokens: cut from the left", self.max_length)
            self.truncated += 1
        return (context + continuation)[-(self.max_length + 1):][:-1], continuation[-self.max_length:]

    def _logits(self, inputs: Sequence[Sequence[int]]) -> torch.Tensor:
        """(batch, longest, vocab) logits of right-padded inputs (the mask hides the padding)."""
        device = next(self.model.parameters()).device
        width = max(len(inp) for inp in inputs)
        ids = torch.zeros((len(inputs), width), dtype=torch.long)
        mask = torch.zeros((len(inputs), width), dtype=torch.long)
        for r, inp in enumerate(inputs):
            ids[r, : len(inp)] = torch.tensor(list(inp))
            mask[r, : len(inp)] = 1
        with torch.no_grad():
            return self.model(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False).logits

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Log-likelihood of whole strings in disjoint windows, each token predicted once (as HFLM)."""
        results = []
        for (string,) in [req.args for req in requests]:
            windows = [make_disjoint_window(w) for w in get_rolling_token_windows(
                token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                max_seq_len=self.max_length, context_len=1)]
            scores = self._loglikelihood_tokens([(None, ctx, cont) for ctx, cont in windows])
            results.append(sum(score for score, _ in scores))
        return results

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Greedy text until a stop string or ``max_gen_toks`` (sampling options are ignored)."""
        outputs = []
        for n, (context, gen_kwargs) in enumerate([req.args for req in requests]):
            until = gen_kwargs.get("until") or []
            stops = [until] if isinstance(until, str) else list(until)
            if gen_kwargs.get("do_sample"):
                log.warning("generate_until: sampling was asked for; decoding greedily")
            new, _ = greedy_ids(self.model, self.tok_encode(context), int(gen_kwargs.get("max_gen_toks", 256)),
                                self.eot_token_id, partial(_has_stop, self.codec, stops))
            text = decode(self.codec, new)
            for stop in stops:
                text = text.split(stop)[0]
            outputs.append(text)
            self.progress(n + 1, len(requests))
        return outputs


def _continuation_score(logits: torch.Tensor, length: int, continuation: list[int]) -> tuple[float, bool]:
    """Sum of the continuation's log-probs, read at the last ``len(continuation)`` positions of the input."""
    logprobs = F.log_softmax(logits[length - len(continuation): length].float(), dim=-1)
    target = torch.tensor(continuation, device=logprobs.device)
    greedy = bool((logprobs.argmax(dim=-1) == target).all())
    return float(logprobs.gather(1, target[:, None]).sum()), greedy


def _has_stop(codec: TextCodec, stops: list[str], ids: list[int]) -> bool:
    return any(stop in decode(codec, ids) for stop in stops)


class LocalTask(ConfigurableTask):
    """lm-eval's configurable task reading its validation split from the folder in ``dataset_path``."""

    def download(self, dataset_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Load the local arrow folder (in memory) instead of ``datasets.load_dataset`` from the hub."""
        self.dataset = load_local_split(self.config.dataset_path)
