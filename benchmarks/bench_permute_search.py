"""Time of the n:m channel-permutation search (``toolkit/methods/permute.py``) on 7B-wide linears.

One JSON line per shape: the seconds of :func:`find_permutation` (the spread, the assignment sweeps over
the m positions), split into the gain matrices and the assignments, the kept score sums it reached and
a SHA-256 of the permutation, so that two commits can be compared exactly (same digest ⇒ same
permutation ⇒ same masks). The scores are seeded Wanda-like scores |W|·‖X‖ of a random linear
(out × in): |N(0, 1)| times a heavy-tailed per-input norm, as the inputs of a decoder's linears have::

    OMP_NUM_THREADS=1 nice -n 10 python -m benchmarks.bench_permute_search --shapes 4096x4096 4096x11008 \\
        --label after --json benchmarks/results/cpu_permute_search.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import subprocess
import time
from typing import Any

import torch

from benchmarks.records import emit
from toolkit.methods import permute
from toolkit.spec.targets import NM, parse_sparsity


def seeded_scores(out: int, width: int, seed: int) -> torch.Tensor:
    """Scores (out, width) float32 ≥ 0: |N(0, 1)| weights times log-normal input norms (a few large inputs)."""
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(out, width, generator=gen).abs()
    norms = torch.exp(1.5 * torch.randn(width, generator=gen))  # (width,): heavy-tailed, as activations are
    return weight * norms


class _Clock:
    """Seconds spent inside the search's two steps, by wrapping them for one call."""

    def __init__(self) -> None:
        self.seconds = {"gains": 0.0, "assign": 0.0}

    def wrap(self, name: str, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
        return timed


def measure(out: int, width: int, target: NM, seed: int) -> dict[str, Any]:
    """One search on seeded scores: seconds (total and per step), kept sums and the permutation's digest."""
    scores = seeded_scores(out, width, seed)
    clock = _Clock()
    gains, assign = permute._gains, permute.assign_max
    permute._gains, permute.assign_max = clock.wrap("gains", gains), clock.wrap("assign", assign)
    try:
        start = time.perf_counter()
        perm, sums = permute.find_permutation(scores, target)
        total = time.perf_counter() - start
    finally:
        permute._gains, permute.assign_max = gains, assign
    return {"shape": f"{out}x{width}", "target": str(target), "seed": seed, "seconds": round(total, 3),
            "gains_seconds": round(clock.seconds["gains"], 3), "assign_seconds": round(clock.seconds["assign"], 3),
            "kept_identity": sums["kept_identity"], "kept_permuted": sums["kept_permuted"],
            "permutation_sha256": hashlib.sha256(perm.numpy().astype("int64").tobytes()).hexdigest()}


def _git() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main() -> None:
    """Time the search on every ``--shapes`` entry (``OUTxIN``) and print one JSON object each."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["4096x4096", "4096x11008"])
    parser.add_argument("--target", default="2:4")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", default="", help="e.g. before / after, to tell two commits' lines apart")
    parser.add_argument("--json", default=None, help="append the lines to this JSON-lines file")
    args = parser.parse_args()
    target = parse_sparsity(args.target)
    assert isinstance(target, NM), "--target is an n:m pattern such as 2:4"
    for shape in args.shapes:
        out, width = (int(x) for x in shape.lower().split("x"))
        record = measure(out, width, target, args.seed)
        emit({"bench": "permute_search", "label": args.label, **record, "threads": torch.get_num_threads(),
              "torch": torch.__version__, "machine": platform.machine(), "git": _git(),
              "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())}, args.json)


if __name__ == "__main__":
    main()
