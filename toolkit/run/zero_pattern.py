"""Whether a quantizer kept the zero pattern of its input model, counted on the weights before and after.

A quantizing run on a pruned model (a 2:4 checkpoint quantized by ``gptq --quant int4``) can fill
the input's zeros: GPTQ's error feedback writes into every later column unless it holds them
(:mod:`toolkit.methods.gptq`, ``keep_zeros``). This module measures it, for every quantizing run
of an in-memory model (``--stream`` runs are not measured):

- before the compression (:func:`input_zeros`): the exact zeros of each decoder-layer linear of a
  model whose lineage says its zeros are a chosen pattern (a pruning run's output,
  :mod:`toolkit.models.lineage`); none of a model whose lineage says they are not (a dense or
  quantized source: Gemma's Q4_K_M GGUF dequantizes with 6 % exact zeros that are rounding); and
  for a model of unknown lineage, of each linear with at least
  :data:`~toolkit.methods.gptq.SPARSE_INPUT` of its weights at 0 (the few zeros of a dense
  checkpoint are no pattern). Also the strongest n:m pattern they all follow (2:4, else 4:8 along
  the inputs), else "unstructured";
- after it (:func:`zero_pattern`), on the weights written: how many of those zeros are still
  exactly 0, the zero fraction before → after, and for an n:m input how many groups of m now hold
  more than n nonzeros. result.json ``zero_pattern`` holds the counts and the summary's ``message``,
  which says how far the pattern broke and how to keep it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from toolkit.methods.gptq import SPARSE_INPUT
from toolkit.models.layers import decoder_layers, get_weight, layer_linears

PATTERNS = ((2, 4), (4, 8))  # the n:m patterns looked for, strongest first
WORDS = {4: "four", 8: "eight"}
LinearKey = tuple[int, str]


@dataclass
class InputZeros:
    """The input model's zeros: bit-packed (out, in) masks of its sparse linears, and their n:m pattern."""

    packed: dict[LinearKey, np.ndarray] = field(default_factory=dict)  # np.packbits of (W == 0).ravel()
    pattern: tuple[int, int] | None = None  # (n, m): at most n nonzeros in every m consecutive inputs


def _linears(model: nn.Module) -> dict[LinearKey, nn.Module]:
    return {(index, name): module for index, layer in enumerate(decoder_layers(model))
            for name, module in layer_linears(layer).items()}


def _follows(weight: Tensor, n: int, m: int) -> bool:
    """Every group of m consecutive inputs of every row holds at most n nonzeros (the width a multiple of m)."""
    rows, cols = weight.shape
    return cols % m == 0 and int((weight != 0).reshape(rows, cols // m, m).sum(dim=2).max()) <= n


def input_zeros(model: nn.Module, sparse: bool | None = None) -> InputZeros | None:
    """The zeros of ``model``'s sparse decoder-layer linears before a quantizer runs; None when none is sparse.

    ``sparse`` is the model's lineage (:attr:`toolkit.models.lineage.Lineage.sparse`): False gives None
    at once, True counts every linear with a zero, None counts those at or above ``SPARSE_INPUT``.
    """
    if sparse is False:
        return None
    floor = 0.0 if sparse else SPARSE_INPUT  # the share of zeros that makes a linear sparse
    found = InputZeros()
    candidates = list(PATTERNS)
    with torch.no_grad():
        for key, module in _linears(model).items():
            weight = get_weight(module)
            zero = weight == 0
            count = int(zero.sum())
            if count == 0 or count < floor * weight.numel():
                continue
            found.packed[key] = np.packbits(zero.cpu().numpy().ravel())
            candidates = [(n, m) for n, m in candidates if _follows(weight, n, m)]
    if not found.packed:
        return None
    found.pattern = candidates[0] if candidates else None
    return found


def zero_pattern(model: nn.Module, before: InputZeros | None, method: str) -> dict[str, Any] | None:
    """result.json ``zero_pattern``: how much of ``before`` the quantized ``model`` kept; None without ``before``."""
    if before is None:
        return None
    n, m = before.pattern or (0, 0)
    linears = _linears(model)
    weights = zeros_before = zeros_after = still = groups = lost = 0
    with torch.no_grad():
        for key, packed in before.packed.items():
            weight = get_weight(linears[key])
            zero_now = (weight == 0).cpu()
            was = torch.from_numpy(np.unpackbits(packed, count=weight.numel()).astype(bool)).reshape(weight.shape)
            weights += weight.numel()
            zeros_before, zeros_after = zeros_before + int(was.sum()), zeros_after + int(zero_now.sum())
            still += int((was & zero_now).sum())
            if m:
                counts = (~zero_now).reshape(weight.shape[0], -1, m).sum(dim=2)
                groups, lost = groups + counts.numel(), lost + int((counts > n).sum())
    record = {"pattern": f"{n}:{m}" if m else "unstructured", "linears": len(before.packed), "weights": weights,
              "zeros_before": zeros_before, "zeros_after": zeros_after, "zeros_kept": still,
              "groups": groups, "groups_lost": lost, "kept": still == zeros_before}
    record["message"] = _message(record, m, method)
    return record


def _message(record: dict[str, Any], m: int, method: str) -> str:
    """The summary's line: the pattern kept, or how far it broke and how to keep it."""
    weights = max(record["weights"], 1)
    share = f"zeros {record['zeros_before'] / weights:.1%} → {record['zeros_after'] / weights:.1%}"
    where = f"{record['linears']} sparse linears"
    if record["kept"]:
        pattern = f"{record['pattern']} in all {record['groups']:,} groups of {WORDS[m]}" if m else "unstructured"
        return f"zero pattern of the input kept ({pattern}): every zero is still 0 ({share}, {where})"
    if m:
        broke = (f"{record['groups_lost']:,} of {record['groups']:,} groups of {WORDS[m]} lost the "
                 f"{record['pattern']} pattern")
    else:
        broke = "the unstructured zeros were filled"
    lost = record["zeros_before"] - record["zeros_kept"]
    keep = ("--set keep_zeros=on holds them" if method == "gptq" else
            "gptq (its keep_zeros, on by default for a pruned input) or rtn holds them exactly")
    return (f"zero pattern of the input NOT kept: {broke}; {lost:,} of {record['zeros_before']:,} zeros are nonzero "
            f"after {method} ({share}, {where}); to keep it: {keep}")
