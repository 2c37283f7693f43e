"""A GGUF measured by llama.cpp itself, through ``llama-cpp-python`` (an optional extra: requirements-llamacpp.txt).

Perplexity on PruneLab's own windows (the same token ids, BOS included where the model takes it)::

    nll(window) = mean over i ≥ 1 of  −log softmax(z_{i−1})[t_i]      (z: llama.cpp's logits)
    ppl = exp(mean over windows of nll(window))

exactly :mod:`toolkit.evaluation.perplexity`'s convention, so the two figures differ only by what
llama.cpp computes differently (its kernels quantize activations to 8 bits for Q4/Q8 weights).

Speed at batch 1: prefill = prompt tokens / seconds of one ``eval`` of the prompt; decode = new tokens /
seconds of feeding them one at a time (greedy, the argmax of the last logits), median over repeats.
``llama_model_quantize`` (llama.cpp's own quantizer, what ``llama-quantize`` runs) re-quantizes a
float GGUF for the head-to-head with PruneLab's grids.
"""

from __future__ import annotations

import importlib
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from toolkit.errors import ToolkitError

INSTALL = ("llama.cpp measurements need llama-cpp-python: `.venv/bin/pip install -r requirements-llamacpp.txt` "
           "(it builds llama.cpp from source with cmake, about 15 min on one core)")
FTYPES = {"q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0", "q4_1": "LLAMA_FTYPE_MOSTLY_Q4_1", "q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M",
          "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0"}


def llama_cpp() -> Any:
    """The ``llama_cpp`` module, or one line saying how to install it."""
    try:
        return importlib.import_module("llama_cpp")  # an optional extra: not installed by `make setup`
    except ImportError:
        raise ToolkitError(INSTALL) from None


@dataclass(frozen=True)
class Speed:
    """Batch-1 throughput of one model: prefill and decode tokens per second (medians) and the threads used."""

    prefill_tps: float
    decode_tps: float
    threads: int


def open_model(path: Path, n_ctx: int, threads: int, logits_all: bool) -> Any:
    """A ``llama_cpp.Llama`` of ``path`` on the CPU (one line when llama.cpp cannot load it)."""
    module = llama_cpp()
    try:
        return module.Llama(str(path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, logits_all=logits_all,
                            n_threads=threads, n_threads_batch=threads, n_gpu_layers=0, verbose=False)
    except (ValueError, RuntimeError) as exc:
        raise ToolkitError(f"llama.cpp could not load {path} ({exc})") from None


def window_nll(logits: np.ndarray, tokens: list[int]) -> float:
    """Mean −log softmax(z_{i−1})[t_i] over i ≥ 1 of one window (float64 log-sum-exp)."""
    z = logits[: len(tokens) - 1].astype(np.float64)
    top = z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z - top).sum(axis=1)) + top[:, 0]
    return float(np.mean(lse - z[np.arange(len(tokens) - 1), tokens[1:]]))


def perplexity(path: Path, windows: list[list[int]], threads: int = 1) -> float:
    """llama.cpp's perplexity of ``path`` on ``windows`` (token ids, every window the same length)."""
    llm = open_model(path, len(windows[0]), threads, logits_all=True)
    nlls = []
    for tokens in windows:
        llm.reset()
        llm.eval(tokens)
        nlls.append(window_nll(np.asarray(llm.scores[: len(tokens)]), tokens))
    llm.close()
    return float(np.exp(np.mean(nlls)))


def speed(path: Path, prompt: list[int], new_tokens: int, repeats: int = 3, threads: int = 1) -> Speed:
    """Batch-1 prefill and decode tokens/s of ``path`` (greedy decode from ``prompt``; medians of ``repeats``)."""
    llm = open_model(path, len(prompt) + new_tokens + 1, threads, logits_all=False)
    prefill, decode = [], []
    for _ in range(repeats):
        llm.reset()
        start = time.perf_counter()
        llm.eval(prompt)
        prefill.append(len(prompt) / (time.perf_counter() - start))
        start = time.perf_counter()
        for _ in range(new_tokens):
            llm.eval([int(np.argmax(llm.scores[llm.n_tokens - 1]))])
        decode.append(new_tokens / (time.perf_counter() - start))
    llm.close()
    return Speed(statistics.median(prefill), statistics.median(decode), threads)


def quantize(source: Path, out: Path, ftype: str, keep_embedding: bool = True, threads: int = 1) -> Path:
    """llama.cpp's own quantizer (``llama-quantize``) of a float GGUF into ``ftype`` (q4_0 | q4_1 | q4_k_m | q8_0).

    ``keep_embedding`` keeps the token embedding and the output head at F16, as PruneLab's exports
    do, so a head-to-head compares the decoder linears alone; False is llama-quantize's default mix.
    """
    module = llama_cpp()
    params = module.llama_model_quantize_default_params()
    params.ftype = getattr(module, FTYPES[ftype])
    params.nthread = threads
    if keep_embedding:
        params.token_embedding_type = module.GGML_TYPE_F16
        params.output_tensor_type = module.GGML_TYPE_F16
    code = module.llama_model_quantize(str(source).encode(), str(out).encode(), params)
    if code != 0:
        raise ToolkitError(f"llama.cpp's quantizer failed on {source} ({ftype}, code {code})")
    return out
