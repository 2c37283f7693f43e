"""AWP's prune-mode solver alone on linears of a model's shapes; one JSON object per shape.

Times :func:`toolkit.methods.awp.prune` (Wanda start, 200 PGD steps at 50 %, the paper's stop rule,
events built but dropped) on random weights and a Gram C = XXᵀ/N of random correlated inputs, next
to the floor of the same number of (out, in) × (in, in) matmuls, so a change to the per-step
overhead shows without the engine's capture, propagation or a noisy host in the way::

    python -m benchmarks.bench_awp_solver --shapes smollm2 --repeats 3
    python -m benchmarks.bench_awp_solver --shapes smollm2 --step-dtype bfloat16
    python -m benchmarks.bench_awp_solver --shapes 4096x4096 11008x4096 --device cuda
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

SHAPES = {  # (out, in) of one decoder layer's linears: q, k, v, o, gate, up, down
    "smollm2": ["576x576", "192x576", "192x576", "576x576", "1536x576", "1536x576", "576x1536"],
    "llama7b": ["4096x4096", "11008x4096", "4096x11008"],
}


def problem(out: int, inn: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """W (out, in) and C (in, in) from 4 × in tokens with a decaying spectrum (seed 0)."""
    gen = torch.Generator().manual_seed(0)
    mix = torch.randn(inn, inn, generator=gen) * torch.logspace(0, -2, inn).unsqueeze(0)
    X = mix @ torch.randn(inn, 4 * inn, generator=gen)
    return torch.randn(out, inn, generator=gen).to(device), (X @ X.T / X.shape[1]).to(device)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(shape: str, device: str, repeats: int, sparsity: float, step_dtype: str = "float32") -> dict:
    """Seconds of the AWP solve (median of ``repeats``) and of its matmuls alone, in ``step_dtype``."""
    from toolkit.methods import awp
    from toolkit.methods.base import LinearStats, SolveContext
    from toolkit.spec.targets import Unstructured

    out, inn = (int(v) for v in shape.split("x"))
    W, C = problem(out, inn, device)
    stats, cfg, target = LinearStats(C, 4 * inn), awp.AWPConfig(step_dtype=step_dtype), Unstructured(sparsity)
    events: list = []
    ctx = SolveContext(emit=events.append)
    solve, iterations = [], 0
    for _ in range(repeats):
        events.clear()
        sync(device)
        start = time.perf_counter()
        result = awp.prune(W, stats, target, cfg, ctx)
        sync(device)
        solve.append(time.perf_counter() - start)
        iterations = result.info["iterations"]
    floor: list[float] = []
    W, C = W.to(getattr(torch, step_dtype)), C.to(getattr(torch, step_dtype))
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        for _ in range(iterations):
            torch.mm(W, C)
        sync(device)
        floor.append(time.perf_counter() - start)
    return {"benchmark": "awp_solver", "shape": shape, "device": device, "threads": torch.get_num_threads(),
            "sparsity": sparsity, "step_dtype": step_dtype, "iterations": iterations, "events": len(events),
            "solve_seconds": round(statistics.median(solve), 3), "matmul_floor_seconds": round(min(floor), 3),
            "overhead": round(statistics.median(solve) / min(floor), 2)}


def main() -> None:
    """Print one JSON object per shape, then the layer's total."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["smollm2"], help="OUTxIN, or smollm2 / llama7b")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sparsity", type=float, default=0.5)
    parser.add_argument("--step-dtype", default="float32", choices=("float32", "bfloat16"),
                        help="AWP's step_dtype option (the per-step matmul's dtype)")
    parser.add_argument("--json", default=None, help="also append the objects to this JSON-lines file")
    args = parser.parse_args()
    from toolkit.runtime.memory import keep_freed_memory

    keep_freed_memory()
    shapes = [s for name in args.shapes for s in SHAPES.get(name, [name])]
    records = [measure(shape, args.device, args.repeats, args.sparsity, args.step_dtype) for shape in shapes]
    total = {"benchmark": "awp_solver", "shape": "total", "shapes": shapes,
             "solve_seconds": round(sum(r["solve_seconds"] for r in records), 3),
             "matmul_floor_seconds": round(sum(r["matmul_floor_seconds"] for r in records), 3),
             "git": _git()}
    for record in [*records, total]:
        print(json.dumps(record), flush=True)
        if args.json:
            with open(args.json, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")


def _git() -> str | None:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip() + ("+" if subprocess.run(
                                  ["git", "diff", "--quiet", "HEAD", "--", "toolkit"]).returncode else "")
    except (OSError, subprocess.CalledProcessError):
        return None


if __name__ == "__main__":
    main()
