"""Quantization (rtn, gptq, awq, awp), pruning (wanda, sparsegpt, awp) and joint solvers on one linear; JSON lines.

    python -m benchmarks.bench_quant_layer                         # 576×1536 and 1536×576 (SmolLM2 sizes)
    python -m benchmarks.bench_quant_layer --shapes 4096x4096 --device cuda
    python -m benchmarks.bench_quant_layer --bits 4 --group 64 --sparsity 2:4
    python -m benchmarks.bench_quant_layer --shapes 512x512 --stats outliers --sparsity 50%

Statistics: the correlated Gram of ``benchmarks.bench_thanos_layer.random_stats`` (random covariance,
uneven column scales) or, with ``--stats outliers``, :func:`outlier_stats` (rank-32 correlated inputs plus
noise, log-normal column scales and 6 channels ×20, as LLM activations have); W ~ N(0, 1), the same for every
method. One record per (shape, task, setting,
method): ``rel_error`` = ‖ΔW X‖/‖W X‖ = sqrt(tr(ΔW C ΔWᵀ)/tr(W C Wᵀ)) from the Gram, ``seconds`` the best
wall time of ``--repeats`` solves after an untimed warm-up. Tasks: ``quant`` (int{bits}:g{group}),
``prune`` (``--sparsity``) and ``joint`` (sparsity + int4). AWP runs with the paper's defaults.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from benchmarks.bench_thanos_layer import random_stats
from toolkit.methods import get_method
from toolkit.methods.base import LinearStats, SolveContext
from toolkit.spec.compression import QuantSpec
from toolkit.spec.targets import Target, parse_sparsity

QUANT_METHODS = ("rtn", "gptq", "awq", "awp")
PRUNE_METHODS = ("wanda", "sparsegpt", "awp")
JOINT_METHODS = ("wanda+awq", "awq+wanda", "awp")
INFO_KEYS = ("iterations", "stop", "alpha", "objective_init")


OUTLIER_RANK, OUTLIERS, OUTLIER_FACTOR = 32, 6, 20.0


def outlier_stats(cols: int, tokens: int, device: torch.device, seed: int) -> LinearStats:
    """Mean Gram of x = (z·M/√rank + 0.3·ε) ⊙ s: low-rank correlation, uneven scales, a few outlier channels."""
    rank, outliers, factor = OUTLIER_RANK, OUTLIERS, OUTLIER_FACTOR
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(tokens, rank, generator=gen) @ torch.randn(rank, cols, generator=gen) / rank**0.5
    X = X + 0.3 * torch.randn(tokens, cols, generator=gen)
    scale = torch.exp(0.5 * torch.randn(cols, generator=gen))
    scale[torch.randperm(cols, generator=gen)[:outliers]] *= factor
    X = (X * scale).to(device)
    return LinearStats(gram=X.T @ X / tokens, count=tokens)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def rel_error(W: torch.Tensor, new: torch.Tensor, stats: LinearStats) -> float:
    """‖(new − W) X‖/‖W X‖ from the Gram, in float64."""
    D, H, W64 = (new - W).double(), stats.gram.double(), W.double()
    return float((torch.sum((D @ H) * D) / torch.sum((W64 @ H) * W64)).sqrt())


def run_one(name: str, W: torch.Tensor, stats: LinearStats, target: Target | None, quant: QuantSpec | None,
            args: argparse.Namespace) -> dict:
    """Best-of-``args.repeats`` wall time, relative error and a few ``info`` entries of one solver."""
    spec = get_method(name)
    cfg = spec.make_config(args.awp if name == "awp" else {})
    repeats = args.repeats
    best = float("inf")
    for _ in range(repeats):
        _sync(W.device)
        start = time.perf_counter()
        result = spec.fn(W, stats, target, cfg, SolveContext(name="mlp.up_proj", quant=quant))
        _sync(W.device)
        best = min(best, time.perf_counter() - start)
    record = {"method": name, "rel_error": round(rel_error(W, result.weight, stats), 6), "seconds": round(best, 4)}
    record.update({k: result.info[k] for k in INFO_KEYS if k in result.info})
    return record


def bench(rows: int, cols: int, args: argparse.Namespace) -> list[dict]:
    """Every task and method on one (rows, cols) linear."""
    device = torch.device(args.device)
    stats = (outlier_stats if args.stats == "outliers" else random_stats)(cols, args.tokens, device, args.seed)
    W = torch.randn(rows, cols, generator=torch.Generator().manual_seed(args.seed + 1)).to(device)
    target = parse_sparsity(args.sparsity)
    int4 = QuantSpec(4, args.group)
    tasks = [("quant", f"int{b}:g{args.group}", None, QuantSpec(b, args.group), QUANT_METHODS) for b in args.bits]
    tasks.append(("prune", str(target), target, None, PRUNE_METHODS))
    tasks.append(("joint", f"{target}+{int4}", target, int4, JOINT_METHODS))
    records = []
    for task, setting, sparsity, quant, methods in tasks:
        for name in methods:
            record = {"shape": [rows, cols], "task": task, "setting": setting}
            record.update(run_one(name, W, stats, sparsity, quant, args))
            records.append(record | {"device": str(device), "threads": torch.get_num_threads()})
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="576x1536,1536x576", help="rows x cols (out x in), comma-separated")
    parser.add_argument("--bits", default="4,3,2", help="bit widths of the quant task")
    parser.add_argument("--group", type=int, default=128, help="quantization group size (0 = per row)")
    parser.add_argument("--sparsity", default="50%", help="pruning target of the prune and joint tasks")
    parser.add_argument("--stats", default="random", choices=("random", "outliers"),
                        help="calibration Gram: random covariance, or low-rank with outlier channels")
    parser.add_argument("--tokens", type=int, default=4096, help="calibration tokens behind the Gram")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=1, help="timed solves per method; the best is reported")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--awp", action="append", default=[], metavar="KEY=VALUE",
                        help="an AWP option (repeatable), e.g. --awp joint_init=dense --awp keep_best=true")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    args.bits = [int(b) for b in args.bits.split(",")]
    if any("=" not in item for item in args.awp):
        parser.error(f"--awp takes KEY=VALUE, got {[item for item in args.awp if '=' not in item]}")
    args.awp = dict(item.split("=", 1) for item in args.awp)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warm = argparse.Namespace(**{**vars(args), "tokens": 64, "repeats": 1})
    bench(8, 128, warm)  # untimed warm-up (kernel and LAPACK loading)
    for shape in args.shapes.split(","):
        rows, cols = (int(v) for v in shape.lower().split("x"))
        for record in bench(rows, cols, args):
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
