"""What a compression bought: kept weights, the bytes the model takes as the run saves it, decode speed.

result.json's ``bought`` section, also carried on :class:`~toolkit.events.RunFinished` (plain data):

- ``kept_weights``: weights of the decoder-layer linears the keep-masks kept; ``params_before`` /
  ``params_after``: those linears' weights before and after (:mod:`toolkit.run.accounting`);
- ``stored_as``: how the run saves the model (``--save-model``): ``"dense"`` (every weight, pruned
  ones as zeros, in the model's dtype), ``"pack-quantized"`` (compressed-tensors codes, scales and
  zero points), ``"shrunk"`` (smaller matrices after heads or channels were removed, or fewer
  decoder layers after depth pruning) or
  ``"shrunk+pack-quantized"``;
- ``bytes_dense``: the source model's parameters stored dense in their dtype (counted before the
  compression); ``bytes_stored``: the compressed model's weights as the run saves them, the
  measured size of the saved ``*.safetensors`` files when it was saved (``bytes_measured``; the
  tokenizer and config are left out on both sides: Gemma's tokenizer alone is 33 MB), else
  computed the same way as ``bytes_dense`` with quantized linears at their bits per weight;
- ``smaller_as_saved``: False for a pruned model stored dense (its zeros take as many bytes as the
  weights did), else whether ``bytes_stored`` < ``bytes_dense``;
- ``speed``: greedy decode tokens/s at batch 1 of the dense and the compressed model
  (:mod:`toolkit.evaluation.speed`), measured only where the model shrank; None elsewhere. Besides
  ``dense_tokens_per_s`` / ``tokens_per_s`` (batch 1, prefill included): ``prompt_tokens``, ``repeats``,
  ``threads`` (torch's intra-op threads) and ``dense_by_batch`` / ``by_batch``, one
  :class:`~toolkit.evaluation.speed.Throughput` per batch size of :data:`~toolkit.evaluation.speed.BATCHES`
  (prefill and decode tokens/s measured apart). A model stored dense is not measured: it has the
  dense model's shapes and computes as much (``python -m toolkit measure`` measures any saved folder).

:func:`dense_price` runs before the compression (it measures the dense model), :func:`bought`
after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from toolkit.evaluation.speed import BATCH, NEW_TOKENS, PROMPT_TOKENS, REPEATS, Throughput, compare
from toolkit.run.accounting import Accounting, dense_bytes, weights_bytes

STORED_AS = ("dense", "pack-quantized", "shrunk", "shrunk+pack-quantized")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DensePrice:
    """The dense model's bytes and, when the compression will shrink it, its decode speed and the prompt used."""

    bytes_dense: int
    tokens_per_s: float | None = None
    prompt: list[int] = field(default_factory=list)
    by_batch: tuple[Throughput, ...] = ()  # one per batch size of BATCHES (the first is batch 1)


Progress = Callable[[int, int], None]  # (done, total) of a speed measurement: the status line names it while it runs


def _quiet(done: int, total: int) -> None:
    """No progress to report."""


def dense_price(model: nn.Module, device: torch.device, prompt: torch.Tensor, *, shrinks: bool,
                progress: Progress = _quiet) -> DensePrice:
    """Measure the dense ``model`` before it is compressed: its bytes, and its decode speed when ``shrinks``.

    ``prompt`` is one window of token ids (its first :data:`~toolkit.evaluation.speed.PROMPT_TOKENS`
    are the speed prompt); ``shrinks``: the method removes units (block scope), so the shrunk model's
    speed will be measured against this one. A model the device cannot hold whole is not measured
    (logged; the record's ``speed`` is then None): the run itself moves one layer at a time.
    """
    size = dense_bytes(model)
    if not shrinks:
        return DensePrice(size)
    ids = [int(i) for i in prompt.reshape(-1)[:PROMPT_TOKENS].tolist()]
    try:
        progress(0, 1)
        by_batch = tuple(compare([model], ids, device)[0])
        progress(1, 1)
        return DensePrice(size, by_batch[0].tokens_per_s, ids, by_batch)
    except torch.OutOfMemoryError:  # the model is back where it was (compare)
        torch.cuda.empty_cache()
        log.warning("decode speed not measured: the whole dense model does not fit on %s", device)
        return DensePrice(size)


def stored_as(accounting: Accounting, quantized: bool) -> str:
    """How the run saves the model (one of :data:`STORED_AS`), from its shapes and whether it quantized."""
    shrunk = accounting.params_after < accounting.params_before
    if quantized:
        return "shrunk+pack-quantized" if shrunk else "pack-quantized"
    return "shrunk" if shrunk else "dense"


def measures_speed(price: DensePrice) -> bool:
    """Whether :func:`bought` will time the compressed model: the dense one was timed (a shrinking method)."""
    return price.tokens_per_s is not None


def bought(price: DensePrice, model: nn.Module, device: torch.device, accounting: Accounting,
           checkpoint: Mapping[str, Any] | None, *, quantized: bool) -> dict[str, Any]:
    """The ``bought`` record of a compressed ``model`` (see the module docstring).

    ``checkpoint`` is the saved checkpoint's report (its ``bytes`` measured on disk), None when the
    run saved none; ``quantized``: the run stored quantization states (a checkpoint saved in the
    ``dense`` format holds them dequantized). Measures the compressed model's decode speed when the
    dense one was measured and the model shrank (the caller names that stage: :func:`measures_speed`).
    """
    kind = stored_as(accounting, quantized and (checkpoint is None or checkpoint.get("format") != "dense"))
    measured = checkpoint is not None and checkpoint.get("folder") is not None
    stored = weights_bytes(checkpoint["folder"]) if checkpoint is not None and measured else \
        int(accounting.estimated_bytes)
    speed = None
    if price.tokens_per_s is not None and kind.startswith("shrunk"):
        by_batch = compare([model], price.prompt, device)[0]
        speed = {"device": str(device), "batch": BATCH, "new_tokens": NEW_TOKENS,
                 "dense_tokens_per_s": price.tokens_per_s, "tokens_per_s": by_batch[0].tokens_per_s,
                 "prompt_tokens": len(price.prompt), "repeats": REPEATS, "threads": torch.get_num_threads(),
                 "dense_by_batch": [t.to_dict() for t in price.by_batch], "by_batch": [t.to_dict() for t in by_batch]}
    return {"kept_weights": int(accounting.nonzeros_kept), "params_before": int(accounting.params_before),
            "params_after": int(accounting.params_after), "stored_as": kind, "bytes_dense": int(price.bytes_dense),
            "bytes_stored": stored, "bytes_measured": bool(measured),
            "smaller_as_saved": kind != "dense" and stored < price.bytes_dense, "speed": speed}
