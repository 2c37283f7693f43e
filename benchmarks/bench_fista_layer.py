"""Time FISTAPruner on one linear with random correlated statistics; prints one JSON line per shape.

    python -m benchmarks.bench_fista_layer                       # 576×576 and 1536×576 (SmolLM2 sizes)
    python -m benchmarks.bench_fista_layer --rows 64 --cols 128 --tokens 512 --device cpu

Inputs: dense x with a random covariance and uneven column scales; pruned-path x* = x plus a
small systematic drift, so the error-corrected objective is exercised. ``seconds`` covers the whole
solve (warm start included) after an untimed warm-up; ``rel_error`` is ‖W*X* − WX‖/‖WX‖ from the statistics.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from toolkit.methods import fista
from toolkit.methods.base import LinearStats, SolveContext
from toolkit.spec.targets import parse_sparsity

DEFAULT_SHAPES = ((576, 576), (1536, 576))


def random_stats(cols: int, tokens: int, device: torch.device, seed: int) -> LinearStats:
    """Means over ``tokens`` of x*x*ᵀ, x*xᵀ and xxᵀ for correlated x (tokens, cols)."""
    gen = torch.Generator().manual_seed(seed)
    mix = torch.randn(cols, cols, generator=gen) / cols**0.5
    scale = torch.exp(torch.randn(cols, generator=gen))  # uneven column norms, as in LLM activations
    X = (torch.randn(tokens, cols, generator=gen) @ mix * scale).to(device)
    Xs = X + 0.1 * X @ (torch.randn(cols, cols, generator=gen) / cols**0.5).to(device)
    return LinearStats(gram=Xs.T @ Xs / tokens, count=tokens, cross=Xs.T @ X / tokens, dense_gram=X.T @ X / tokens)


def bench(rows: int, cols: int, args: argparse.Namespace) -> dict:
    """Solve one (rows, cols) linear and return the JSON record."""
    device = torch.device(args.device)
    stats = random_stats(cols, args.tokens, device, args.seed)
    W = torch.randn(rows, cols, generator=torch.Generator().manual_seed(args.seed + 1)).to(device)
    cfg = fista.SPEC.make_config({"warm_start": args.warm_start, "bisection": args.bisection, "trace_every": 0})
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = fista.prune(W, stats, parse_sparsity(args.sparsity), cfg, SolveContext())
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {
        "method": "fista", "shape": [rows, cols], "seconds": round(seconds, 4), "rounds": result.info["rounds"],
        "rel_error": result.info["final_error"], "warm_start_rel_error": result.info["warm_start_error"],
        "chosen": result.info["chosen"], "sparsity": args.sparsity, "tokens": args.tokens,
        "warm_start": args.warm_start, "bisection": args.bisection, "device": str(device),
        "torch": torch.__version__, "threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None, help="out_features (default: the two SmolLM2 shapes)")
    parser.add_argument("--cols", type=int, default=None, help="in_features")
    parser.add_argument("--tokens", type=int, default=4096, help="calibration tokens behind the statistics")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sparsity", default="50%")
    parser.add_argument("--warm-start", default="sparsegpt", choices=("wanda", "sparsegpt", "magnitude"))
    parser.add_argument("--bisection", default="arithmetic", choices=("arithmetic", "geometric"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (1 avoids OpenMP stalls on an oversubscribed machine)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    shapes = DEFAULT_SHAPES if args.rows is None and args.cols is None else ((args.rows or 576, args.cols or 576),)
    bench(8, 8, args)  # untimed warm-up: the first LAPACK/BLAS call loads its kernels (seconds on MKL)
    for rows, cols in shapes:
        print(json.dumps(bench(rows, cols, args)))


if __name__ == "__main__":
    main()
