"""Time of the n:m channel-permutation search (``toolkit/methods/permute.py``) on 7B-wide linears.

One JSON line per shape: the seconds of :func:`find_permutation` (the spread, the assignment sweeps over
the m positions), split into the gain matrices and the assignments, the kept score sums it reached and
a SHA-256 of the permutation, so that two commits can be compared exactly (same digest ⇒ same
permutation ⇒ same masks). The scores are seeded Wanda-like scores |W|·‖X‖ of a random linear
(out × in): |N(0, 1)| times a heavy-tailed per-input norm, as the inputs of a decoder's linears have::

    OMP_NUM_THREADS=1 nice -n 10 python -m benchmarks.bench_permute_search --shapes 4096x4096 4096x11008 \\
        --label after --json benchmarks/results/cpu_permute_search.jsonl

``--baseline COMMIT`` times one assignment step only (position 0, the same gain matrix) with this tree's
solver and with the one of ``COMMIT``, in the same process, and says whether the assignments are the same;
with ``--whole`` the whole search instead, and whether the permutations and the masks are the same.
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.records import emit
from toolkit.methods import permute
from toolkit.run.provenance import git_head
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


def baseline_module(commit: str) -> Any:
    """``toolkit/methods/permute.py`` as it was at ``commit`` (read with ``git show``), imported under another name."""
    import importlib.util
    import tempfile

    source = subprocess.run(["git", "show", f"{commit}:toolkit/methods/permute.py"], capture_output=True, text=True,
                            check=True).stdout
    path = Path(tempfile.mkdtemp()) / "permute_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("permute_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compare_assignment(out: int, width: int, target: NM, seed: int, baseline: Any) -> dict[str, Any]:
    """One assignment step (position 0 of the spread order): this tree's and ``baseline``'s solver, same gains."""
    import numpy as np

    scores = seeded_scores(out, width, seed)
    blocks = permute.spread(scores.sum(0), target.m).reshape(-1, target.m)  # (K, m)
    start = time.perf_counter()
    gain = permute._gains(scores, blocks, 0, target.n).numpy()  # (K, K) float64
    gains_seconds = time.perf_counter() - start
    start = time.perf_counter()
    ours = permute.assign_max(gain)
    ours_seconds = time.perf_counter() - start
    start = time.perf_counter()
    theirs = baseline.assign_max(gain)
    theirs_seconds = time.perf_counter() - start
    rows = np.arange(gain.shape[0])
    return {"shape": f"{out}x{width}", "target": str(target), "seed": seed, "groups": int(gain.shape[0]),
            "gains_seconds": round(gains_seconds, 3), "assign_seconds": round(ours_seconds, 3),
            "baseline_assign_seconds": round(theirs_seconds, 3), "same_assignment": bool((ours == theirs).all()),
            "gain_difference": float(gain[rows, ours].sum() - gain[rows, theirs].sum())}


def compare_search(out: int, width: int, target: NM, seed: int, baseline: Any) -> dict[str, Any]:
    """The whole search with this tree's code and ``baseline``'s: seconds, and whether permutation and mask agree."""
    from toolkit.methods.masks import keep_nm

    scores = seeded_scores(out, width, seed)
    found = {}
    for name, module in (("ours", permute), ("baseline", baseline)):
        start = time.perf_counter()
        perm, sums = module.find_permutation(scores, target)
        found[name] = (perm, keep_nm(scores[:, perm], target)[:, torch.argsort(perm)], sums,
                       time.perf_counter() - start)  # the mask in the stored order
    (ours, keep, sums, seconds), (theirs, their_keep, their_sums, their_seconds) = found["ours"], found["baseline"]
    return {"shape": f"{out}x{width}", "target": str(target), "seed": seed, "seconds": round(seconds, 3),
            "baseline_seconds": round(their_seconds, 3), "kept_permuted": sums["kept_permuted"],
            "baseline_kept_permuted": their_sums["kept_permuted"],
            "positions_differing": int((ours != theirs).sum()), "same_mask": bool(torch.equal(keep, their_keep))}


def main() -> None:
    """Time the search on every ``--shapes`` entry (``OUTxIN``) and print one JSON object each."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["4096x4096", "4096x11008"])
    parser.add_argument("--target", default="2:4")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", default="", help="e.g. before / after, to tell two commits' lines apart")
    parser.add_argument("--json", default=None, help="append the lines to this JSON-lines file")
    parser.add_argument("--baseline", default=None, metavar="COMMIT",
                        help="time one assignment step only, this tree's against the solver of COMMIT, on one gain "
                             "matrix (position 0 of the spread order)")
    parser.add_argument("--whole", action="store_true", help="with --baseline: the whole search instead, and "
                                                             "whether both give the same permutation and mask")
    args = parser.parse_args()
    target = parse_sparsity(args.target)
    assert isinstance(target, NM), "--target is an n:m pattern such as 2:4"
    baseline = baseline_module(args.baseline) if args.baseline else None
    for shape in args.shapes:
        out, width = (int(x) for x in shape.lower().split("x"))
        if baseline is not None and args.whole:
            record = {"step": "search", "baseline": args.baseline,
                      **compare_search(out, width, target, args.seed, baseline)}
        elif baseline is not None:
            record = {"step": "assignment", "baseline": args.baseline,
                      **compare_assignment(out, width, target, args.seed, baseline)}
        else:
            record = {"step": "search", **measure(out, width, target, args.seed)}
        emit({"bench": "permute_search", "label": args.label, **record, "threads": torch.get_num_threads(),
              "torch": torch.__version__, "machine": platform.machine(), "git": git_head() or None,
              "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())}, args.json)


if __name__ == "__main__":
    main()
