"""The solves of one 7B-shaped linear against their compute floor, and SparseGPT against the official code.

    OMP_NUM_THREADS=1 python -m benchmarks.bench_solve --official /tmp/sparsegpt_official/sparsegpt.py \\
        --json benchmarks/results/solve_floor_cpu.jsonl

One random linear per shape (default Llama-2-7B's q_proj 4096×4096 and up_proj 11008×4096, out × in), a
mean Gram H = XᵀX/T of T correlated, unevenly scaled inputs (as in ``bench_thanos_layer``), 50 %
unstructured. Every solve runs on the same W and H in one process at the same torch thread count. For each
solve one JSON line: ``seconds`` (the process's CPU seconds of the solve, after one untimed small warm-up;
with one thread that is the time it computed, which a shared machine inflates less than ``wall_seconds``),
``flops`` (its count below), ``floor_seconds`` = flops / rate, where ``rate`` is the flop rate (per CPU
second) of one plain ``torch.mm`` (out, in) @ (in, in) of 2·out·in² flops timed on the same threads, and
``ratio`` = seconds / floor (``ratio_wall`` the same with the wall time). ``rel_error`` =
tr(ΔW H ΔWᵀ) / tr(W H Wᵀ) on the undamped H (the relative squared output error ‖ΔW X‖²/‖W X‖²).

Flop counts (n = in, m = out, B = block size, p = sparsity; multiply-add = 2 flops):

* Inverse factor (both SparseGPT codes and Thanos): Cholesky of H + δI (n³/3), its inverse from the factor
  (2n³/3), the upper Cholesky factor of H⁻¹ (n³/3):  F_inv = 4n³/3.
* SparseGPT sweep: inside a block, column i updates the B − i columns to its right (2m(B − i) flops),
  m·B(B + 1) per block; after block k, the lazy update of the n − kB columns to the right costs 2mB(n − kB).
  Summed over n/B blocks: m·n·(B + 1) + m·n·(n − B) = m·n·(n + 1).
  **F_sparsegpt = 4n³/3 + m·n·(n + 1).**
* Thanos sweep (block j1 with f = n − j1 free columns): the block's (H_FF)⁻¹ rows, U_bᵀU_b (2B³); each
  row's s×s system, s = min(pB, B − pB), solved by Cholesky (s³/3, the expected s of the global mask);
  λU_bᵀ (2mB²); the update of the f free columns (2mBf). Summed over n/B blocks:
  **F_thanos = 4n³/3 + 2nB² + m·n·s³/(3B) + 2mnB + m·n·(n + B).**
* FISTAPruner (``fista``, warm start ``magnitude`` so the count is FISTA's own; error correction on, with
  C = G* = G standing in for the three statistics, which costs the same products): the quadratic's set-up
  (R = W(G − Cᵀ) in float32; ½tr(WMWᵀ) and tr(W G Wᵀ) in float64), the warm start's error (1), then every
  outer λ round: one D G for the start, one per FISTA iteration, one for the rounded error. Each product
  is (m, n) @ (n, n), 2mn² flops: **F_fista = 2mn²·(2 + 2·rounds + iterations) + 2 float64 products.**
  Its floor times those products alone (the float64 ones as float64); L = λ_max(G) by ``eigvalsh`` is
  not a product and is reported apart (``eigvalsh_seconds``).

For SparseGPT and Thanos the timed run also clocks the LAPACK calls whose float32 rounding the weight digests pin
(the damped Cholesky, its inverse and the upper factor of the inverse; Thanos's batched per-row ``solve_ex``; two
clock reads per call, about a thousand calls per linear): ``lapack_seconds`` (per call in ``lapack_ops``), their
share of the solve's CPU seconds (``lapack_share``) and ``lapack_over_floor`` = lapack_seconds / floor. Where
``lapack_over_floor`` is above 2, no reordering of the rest of the solve reaches 2× its floor without replacing one
of those calls, which moves the digests.

The official SparseGPT (``--official``: the path of its ``sparsegpt.py``, with the repository's ``quant.py``
beside it, which it imports) runs ``fasterprune(0.5, blocksize=128, percdamp=0.01)`` on an ``nn.Linear``
holding W with its H set to ours (the damping is relative to mean(diag H), so the scale of H cancels);
without ``--official`` it is "not measured". The machine may be shared: ``load_1min`` is recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.bench_thanos_layer import random_stats
from benchmarks.records import emit
from toolkit.methods import fista, sparsegpt, thanos
from toolkit.methods.base import LinearStats, SolveContext
from toolkit.run.provenance import git_head
from toolkit.spec.targets import Unstructured

SHAPES = {"q_proj": (4096, 4096), "up_proj": (11008, 4096), "down_proj": (4096, 11008)}
BLOCK = 128
SPARSITY = 0.5


def mm_rate(m: int, n: int, dtype: torch.dtype = torch.float32, repeats: int = 2) -> float:
    """Flops per CPU second of (m, n) @ (n, n) on this thread count (best of ``repeats`` after a warm-up)."""
    a, b = torch.randn(m, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    torch.mm(a[:64], b)
    best = min(timed(lambda: torch.mm(a, b))[0][1] for _ in range(repeats))
    return 2.0 * m * n * n / best


def flops_inverse(n: int) -> float:
    """Cholesky, inverse from the factor, Cholesky of the inverse: 4n³/3."""
    return 4.0 * n**3 / 3.0


def flops_sparsegpt(m: int, n: int) -> float:
    """F_sparsegpt = 4n³/3 + m·n·(n + 1) (module docstring)."""
    return flops_inverse(n) + m * n * (n + 1.0)


def flops_thanos(m: int, n: int, block: int = BLOCK, sparsity: float = SPARSITY) -> float:
    """F_thanos = 4n³/3 + 2nB² + m·n·s³/(3B) + 2mnB + m·n·(n + B), s = min(pB, B − pB)."""
    s = min(sparsity * block, block - sparsity * block)
    solves = m * n * s**3 / (3.0 * block)
    return flops_inverse(n) + 2.0 * n * block**2 + solves + 2.0 * m * n * block + m * n * (n + block)


LAPACK_OPS = ("linalg.cholesky_ex", "cholesky_inverse", "linalg.solve_ex")  # the calls the digests pin


@contextlib.contextmanager
def lapack_clock() -> Any:
    """While open, every call of :data:`LAPACK_OPS` adds its CPU seconds to the yielded dict (one key per op).

    The calls are wrapped where the solvers look them up (``torch.linalg.*``, ``torch.cholesky_inverse``) and
    restored on exit. ``torch.profiler`` is not used: under it ``cholesky_inverse`` at n = 4096 took 1.33 s against
    0.63 s timed plainly, and at n = 11008 its op times summed to more than the whole run's CPU time.
    """
    spent: dict[str, float] = {}
    saved = []
    for op in LAPACK_OPS:
        owner = torch.linalg if op.startswith("linalg.") else torch
        name = op.removeprefix("linalg.")
        original = getattr(owner, name)

        def wrapped(*args: Any, _op: str = op, _fn: Any = original, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return _fn(*args, **kwargs)
            finally:
                spent[_op] = spent.get(_op, 0.0) + time.process_time() - started

        saved.append((owner, name, original))
        setattr(owner, name, wrapped)
    try:
        yield spent
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def timed_lapack(fn: Any, floor: float) -> tuple[tuple[float, float], Any, dict[str, Any]]:
    """``timed(fn)`` with :data:`LAPACK_OPS` clocked: ((wall, CPU seconds), result, the ``lapack_*`` fields)."""
    with lapack_clock() as spent:
        seconds, result = timed(fn)
    total, cpu = sum(spent.values()), seconds[1]
    return seconds, result, {
        "lapack_seconds": round(total, 3), "lapack_ops": {op: round(s, 3) for op, s in spent.items()},
        "lapack_share": round(total / cpu, 3) if cpu > 0 else None,
        "lapack_over_floor": round(total / floor, 2) if floor > 0 else None}


def rel_error(W: torch.Tensor, W_hat: torch.Tensor, H: torch.Tensor) -> float:
    """tr(ΔW H ΔWᵀ) / tr(W H Wᵀ) in float64."""
    D, Wd, Hd = (W_hat - W).double(), W.double(), H.double()
    return float(((D @ Hd) * D).sum() / ((Wd @ Hd) * Wd).sum())


def timed(fn: Any) -> tuple[tuple[float, float], Any]:
    """((wall seconds, process CPU seconds), result) of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return (time.perf_counter() - wall, time.process_time() - cpu), result


def _load_file(name: str, path: Path) -> Any:
    """Execute the Python file ``path`` as module ``name`` (registered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: not a Python file; give the path of the official sparsegpt.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_official(path: str) -> Any:
    """The official ``sparsegpt`` module from ``path``; its ``from quant import *`` gets the ``quant.py`` beside it."""
    quant = Path(path).resolve().parent / "quant.py"
    if not quant.is_file():
        raise SystemExit(f"--official {path}: the official code's quant.py must sit beside it ({quant} is missing)")
    _load_file("quant", quant)
    return _load_file("sparsegpt_official", Path(path))


def run_official(module: Any, W: torch.Tensor, H: torch.Tensor) -> tuple[tuple[float, float], torch.Tensor]:
    """(seconds, pruned weight) of the official ``fasterprune`` at 50 %, blocksize 128, 1 % damping."""
    layer = torch.nn.Linear(W.shape[1], W.shape[0], bias=False)
    layer.weight.data = W.clone()
    pruner = module.SparseGPT(layer)
    pruner.H = H.clone()
    sync = torch.cuda.synchronize
    torch.cuda.synchronize = lambda *a, **k: None  # the official code synchronizes CUDA unconditionally
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints its own time and error
            seconds, _ = timed(lambda: pruner.fasterprune(SPARSITY, blocksize=BLOCK, percdamp=0.01))
    finally:
        torch.cuda.synchronize = sync
    return seconds, layer.weight.data.clone()


def _record(linear: str, shape: tuple[int, int], solver: str, **fields: Any) -> dict[str, Any]:
    """One JSON line: ``seconds`` = (wall, CPU) and the floor (CPU seconds) come unrounded and leave rounded.

    ``ratio`` = CPU seconds / floor: with one thread the process's CPU time is the time it computed, which a
    shared machine inflates less than the wall time (``wall_seconds``, ``ratio_wall``).
    """
    (wall, cpu), floor = fields.pop("seconds"), fields["floor_seconds"]
    base = {"bench": "solve_floor", "linear": linear, "shape": list(shape), "solver": solver,
            "ratio": round(cpu / floor, 2) if floor > 0 else None,
            "ratio_wall": round(wall / floor, 2) if floor > 0 else None}
    return {**base, **fields, "seconds": round(cpu, 3), "wall_seconds": round(wall, 3),
            "floor_seconds": round(floor, 4)}


def bench_obs(linear: str, W: torch.Tensor, stats: LinearStats, rate: float, official: Any) -> list[dict[str, Any]]:
    """SparseGPT (ours and the official) and Thanos on one linear."""
    m, n = W.shape
    target = Unstructured(SPARSITY)
    flops = flops_sparsegpt(m, n)
    seconds, ours, lapack = timed_lapack(
        lambda: sparsegpt.prune(W, stats, target, sparsegpt.SparseGPTConfig(), SolveContext()), flops / rate)
    fields: dict[str, Any] = {"seconds": seconds, "flops": flops, "floor_seconds": flops / rate,
                              "rel_error": round(rel_error(W, ours.weight, stats.gram), 6),
                              "official_seconds": "not measured", "official_rel_error": "not measured", **lapack}
    if official is not None:
        (off_wall, off_cpu), off_weight = run_official(official, W, stats.gram)
        fields["official_seconds"], fields["official_wall_seconds"] = round(off_cpu, 3), round(off_wall, 3)
        fields["official_rel_error"] = round(rel_error(W, off_weight, stats.gram), 6)
        fields["mask_agreement"] = round(float((ours.keep_mask == (off_weight != 0)).float().mean()), 6)
    records = [_record(linear, (m, n), "sparsegpt", **fields)]
    flops = flops_thanos(m, n)
    seconds, result, lapack = timed_lapack(
        lambda: thanos.prune(W, stats, target, thanos.ThanosConfig(), SolveContext()), flops / rate)
    records.append(_record(linear, (m, n), "thanos", seconds=seconds, flops=flops, floor_seconds=flops / rate,
                           rel_error=round(rel_error(W, result.weight, stats.gram), 6), **lapack))
    return records


def bench_fista(linear: str, W: torch.Tensor, stats: LinearStats, args: argparse.Namespace) -> dict[str, Any]:
    """FISTAPruner (magnitude warm start, capped rounds/iterations) against the time of its products."""
    m, n = W.shape
    cfg = fista.FistaConfig(warm_start="magnitude", fista_iters=args.fista_iters, max_rounds=args.fista_rounds,
                            trace_every=0)
    full = LinearStats(gram=stats.gram, count=stats.count, cross=stats.gram, dense_gram=stats.gram)
    seconds, result = timed(lambda: fista.prune(W, full, Unstructured(SPARSITY), cfg, SolveContext()))
    products = 2 + 2 * result.info["rounds"] + result.info["fista_steps"]
    rate32, rate64 = mm_rate(m, n), mm_rate(m, n, torch.float64)
    floor = 2.0 * m * n * n * (products / rate32 + 2 / rate64)
    (_, eig_seconds), _ = timed(lambda: torch.linalg.eigvalsh(stats.gram))
    return _record(linear, (m, n), "fista", seconds=seconds, products_float32=products,
                   products_float64=2, rounds=result.info["rounds"], iterations=result.info["fista_steps"],
                   floor_seconds=floor, eigvalsh_seconds=round(eig_seconds, 3),
                   rel_error=round(result.info["final_error"] ** 2, 6))


def _load() -> float | None:
    with contextlib.suppress(OSError):
        return os.getloadavg()[0]
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--official", default=None, help="path of the official SparseGPT sparsegpt.py")
    parser.add_argument("--linears", nargs="*", default=["q_proj", "up_proj"], choices=tuple(SHAPES))
    parser.add_argument("--fista-linear", default="q_proj", choices=(*SHAPES, "none"))
    parser.add_argument("--fista-iters", type=int, default=5, help="FISTA iterations per round (cap)")
    parser.add_argument("--fista-rounds", type=int, default=2, help="outer λ rounds (cap)")
    parser.add_argument("--tokens", type=int, default=8192, help="calibration tokens behind H")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="append the records to this JSON-lines file")
    args = parser.parse_args()
    if args.official is not None and not Path(args.official).is_file():
        raise SystemExit(f"--official {args.official}: no such file; extract the official sparsegpt.py first")
    torch.set_num_threads(args.threads)
    official = load_official(args.official) if args.official else None
    common = {"commit": git_head(), "device": "cpu", "threads": torch.get_num_threads(),
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "tokens": args.tokens, "torch": torch.__version__}
    small = random_stats(64, 256, torch.device("cpu"), args.seed)
    bench_obs("warm-up", torch.randn(64, 64), small, 1e9, official)  # untimed: loads the LAPACK kernels
    fista_linears: list[str] = [args.fista_linear] if args.fista_linear != "none" else []
    linears: list[str] = list(dict.fromkeys([*args.linears, *fista_linears]))
    for linear in linears:
        m, n = SHAPES[linear]
        stats = random_stats(n, args.tokens, torch.device("cpu"), args.seed)
        W = torch.randn(m, n, generator=torch.Generator().manual_seed(args.seed + 1)) * 0.02
        rate = mm_rate(m, n)
        records = bench_obs(linear, W, stats, rate, official) if linear in args.linears else []
        if linear == args.fista_linear:
            records.append(bench_fista(linear, W, stats, args))
        for record in records:
            emit({**record, **common, "mm_gflops": round(rate / 1e9, 2), "load_1min": _load()}, args.json)


if __name__ == "__main__":
    main()
