"""The matmul floor of one decoder layer: what its linears alone cost for the engine's passes.

For T = nsamples × seqlen calibration tokens, each linear of the layer (q, k, v, o, gate, up, down with the
shape's real sizes) computes ``x @ W.T`` over all T tokens, in chunks of ``chunk_windows`` windows so the
activations stay bounded. The engine runs the layer at least twice per layer (the statistics pass and the
propagation pass), so the floor is two such passes. Nothing else is counted (attention scores, norms,
activations, hooks, statistics, solves): a measured time close to the floor means the passes are bound by
their matmuls.

On CUDA every chunk is timed (after a warm-up, with ``torch.cuda.synchronize``); on a CPU one probe of at
most ``CPU_PROBE_TOKENS`` rows per linear is timed and scaled by T / rows, so the floor costs seconds, not the
minutes the real passes would.
"""

from __future__ import annotations

import math
import time
from typing import Any

from benchmarks.scale_configs import layer_linears

PASSES = 2  # statistics pass + propagation pass
CHUNK_WINDOWS = 8
CPU_PROBE_TOKENS = 512
WARMUP_ROWS = 64


def compute_dtype(device: str, forward_dtype: str) -> str:
    """The dtype the layer's forward runs in: bf16 on CUDA unless fp32 was asked, float32 on a CPU unless bf16."""
    if device.startswith("cuda"):
        return "float32" if forward_dtype == "fp32" else "bfloat16"
    return "bfloat16" if forward_dtype == "bf16" else "float32"


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_linear(n_in: int, n_out: int, rows: int, repeats: int, where: tuple[Any, Any]) -> float:
    """Seconds of ``repeats`` products ``x @ W.T`` with x (rows, n_in), W (n_out, n_in), after one warm-up."""
    import torch

    device, dtype = where
    weight = torch.randn(n_out, n_in, device=device, dtype=dtype)
    x = torch.randn(rows, n_in, device=device, dtype=dtype)
    torch.matmul(x[:WARMUP_ROWS], weight.T)  # warm-up: kernel selection, first-touch of the weight
    _sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.matmul(x, weight.T)
    _sync(device)
    return time.perf_counter() - start


def _plan(tokens: int, chunk_tokens: int, device: Any) -> tuple[int, int, float]:
    """(rows timed per product, products timed, scale to all T tokens) for ``device``."""
    if device.type == "cuda":
        full, rest = divmod(tokens, chunk_tokens)
        # a remainder chunk is timed as a full one, then the total is scaled to the T tokens asked
        return chunk_tokens, full + (1 if rest else 0), tokens / (chunk_tokens * (full + (1 if rest else 0)))
    rows = min(chunk_tokens, CPU_PROBE_TOKENS)
    return rows, 1, tokens / rows


def floor_seconds(shape: dict[str, Any], nsamples: int, seqlen: int, device: str = "cpu",
                  forward_dtype: str = "auto") -> dict[str, Any]:
    """The matmul floor of one decoder layer of ``shape`` for ``nsamples`` windows of ``seqlen`` tokens.

    ``device`` is ``cpu`` | ``cuda`` | ``cuda:N``; ``forward_dtype`` is the engine's ``auto`` | ``fp32`` | ``bf16``.
    Returns ``floor_seconds_per_layer`` (both passes, all linears), the seconds per linear (both passes),
    the compute dtype, tokens, chunking and whether the time was scaled from a probe. Allocates one weight and
    one chunk of activations at a time.
    """
    import torch

    dev = torch.device(device)
    dtype_name = compute_dtype(device, forward_dtype)
    where = (dev, getattr(torch, dtype_name))
    tokens = nsamples * seqlen
    chunk_tokens = min(nsamples, CHUNK_WINDOWS) * seqlen
    rows, repeats, scale = _plan(tokens, chunk_tokens, dev)
    per_linear = {name: PASSES * scale * _time_linear(n_in, n_out, rows, repeats, where)
                  for name, n_in, n_out in layer_linears(shape)}
    total = sum(per_linear.values())
    flops = PASSES * 2 * tokens * sum(n_in * n_out for _, n_in, n_out in layer_linears(shape))
    return {"floor_seconds_per_layer": total, "linears": {k: round(v, 6) for k, v in per_linear.items()},
            "compute_dtype": dtype_name, "device": str(dev), "tokens": tokens, "chunk_tokens": chunk_tokens,
            "chunks": math.ceil(tokens / chunk_tokens), "passes": PASSES, "rows_timed": rows,
            "scaled_from_probe": dev.type != "cuda", "tflops": round(flops / total / 1e12, 3) if total else None}


FORWARD_PHASES = ("capture", "statistics", "propagation", "error")


def floor_ratios(floor: dict[str, Any], seconds_per_layer: float, phases: dict[str, float] | None,
                 layers: int) -> dict[str, Any]:
    """Measured time over the floor: the whole layer, each phase, and the forward-pass phases together.

    ``phases`` holds totals over the ``layers`` layers (``result["phases"]``); absent phases give None ratios.
    """
    base = floor["floor_seconds_per_layer"]
    ratios: dict[str, Any] = {"ratio_to_floor": seconds_per_layer / base if base else None,
                              "phase_ratio_to_floor": None, "forward_phases_ratio_to_floor": None}
    if phases and base:
        ratios["phase_ratio_to_floor"] = {name: round(float(sec) / layers / base, 3) for name, sec in phases.items()}
        forward = sum(float(phases.get(name, 0.0)) for name in FORWARD_PHASES)
        ratios["forward_phases_ratio_to_floor"] = forward / layers / base
    return ratios
