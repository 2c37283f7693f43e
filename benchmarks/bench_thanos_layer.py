"""Time Thanos against SparseGPT on one linear with random correlated statistics; one JSON line per method.

    python -m benchmarks.bench_thanos_layer                          # 576×576 and 1536×576 (SmolLM2 sizes)
    python -m benchmarks.bench_thanos_layer --rows 4096 --cols 4096 --sparsity 2:4
    python -m benchmarks.bench_thanos_layer --rows 11008 --cols 4096 --device cuda

Inputs: x with a random covariance and uneven column scales (tokens, cols); W ~ N(0, 1). Both solvers
get the same statistics and weight. ``seconds`` is the best wall time of ``--repeats`` solves after an
untimed warm-up (the first LAPACK call loads MKL kernels), ``cpu_seconds`` the process CPU time of that
solve (steadier on a shared machine), ``rel_error`` = ‖ΔW X‖/‖W X‖ = sqrt(tr(ΔW H ΔWᵀ)/tr(W H Wᵀ)).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from toolkit.methods import sparsegpt, thanos
from toolkit.methods.base import LinearStats, MethodSpec, SolveContext
from toolkit.spec.targets import Target, parse_sparsity

DEFAULT_SHAPES = ((576, 576), (1536, 576))
METHODS = (thanos.SPEC, sparsegpt.SPEC)


def random_stats(cols: int, tokens: int, device: torch.device, seed: int) -> LinearStats:
    """Mean Gram x xᵀ over ``tokens`` correlated inputs x (tokens, cols)."""
    gen = torch.Generator().manual_seed(seed)
    mix = torch.randn(cols, cols, generator=gen) / cols**0.5
    scale = torch.exp(torch.randn(cols, generator=gen))  # uneven column norms, as in LLM activations
    X = (torch.randn(tokens, cols, generator=gen) @ mix * scale).to(device)
    return LinearStats(gram=X.T @ X / tokens, count=tokens)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_method(spec: MethodSpec, W: torch.Tensor, stats: LinearStats, target: Target, repeats: int) -> dict:
    """Best-of-``repeats`` timing of one solve and the relative reconstruction error."""
    cfg = spec.make_config({})
    best = (float("inf"), float("inf"))
    for _ in range(repeats):
        _sync(W.device)
        wall, cpu = time.perf_counter(), time.process_time()
        result = spec.fn(W, stats, target, cfg, SolveContext())
        _sync(W.device)
        best = min(best, (time.perf_counter() - wall, time.process_time() - cpu))
    D = (result.weight - W).double()
    H = stats.gram.double()
    rel = (torch.trace(D @ H @ D.T) / torch.trace(W.double() @ H @ W.double().T)).sqrt().item()
    zeros = 1.0 - result.keep_mask.float().mean().item()
    return {"seconds": round(best[0], 4), "cpu_seconds": round(best[1], 4), "rel_error": round(rel, 6),
            "achieved_sparsity": round(zeros, 4)}


def bench(rows: int, cols: int, args: argparse.Namespace) -> list[dict]:
    """Both methods on one (rows, cols) linear; returns one record per method."""
    device = torch.device(args.device)
    stats = random_stats(cols, args.tokens, device, args.seed)
    W = torch.randn(rows, cols, generator=torch.Generator().manual_seed(args.seed + 1)).to(device)
    target = parse_sparsity(args.sparsity)
    records = []
    for spec in METHODS:
        record = {"method": spec.name, "shape": [rows, cols], "sparsity": args.sparsity, "device": str(device)}
        record.update(time_method(spec, W, stats, target, args.repeats))
        record.update({"tokens": args.tokens, "threads": torch.get_num_threads(), "torch": torch.__version__})
        records.append(record)
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None, help="out_features (default: the two SmolLM2 shapes)")
    parser.add_argument("--cols", type=int, default=None, help="in_features")
    parser.add_argument("--tokens", type=int, default=4096, help="calibration tokens behind the statistics")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sparsity", default="50%", help="50%%, 2:4, 4:8 or structured:30%%")
    parser.add_argument("--repeats", type=int, default=3, help="timed solves per method; the best is reported")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    shapes = DEFAULT_SHAPES if args.rows is None and args.cols is None else ((args.rows or 576, args.cols or 576),)
    warm = argparse.Namespace(**{**vars(args), "tokens": 64, "repeats": 1})
    bench(16, 16, warm)  # untimed warm-up
    for rows, cols in shapes:
        for record in bench(rows, cols, args):
            print(json.dumps(record))


if __name__ == "__main__":
    main()
