"""Layer-wise allocation (OWL) and mask refinement (DSnoT) on the embedded model (prints JSON, one object a run).

Protocol (the CPU protocol of docs/results.md): calibration wiki train, 32 × 512 tokens, seed 0;
evaluation wiki test, seqlen 512, all windows. Each run is a method at a sparsity with an
allocation (``uniform`` | ``owl``) and optionally ``--refine dsnot``; the JSON object has the
perplexity, the achieved sparsity, the per-layer ratios, DSnoT's swaps and errors, and the seconds
of each step (pruning, plan phase, refinement, evaluation).

    python -m benchmarks.bench_allocation --methods wanda sparsegpt fista --sparsities 70% 60% \
        --json benchmarks/results/allocation_cpu.jsonl

Runs already in ``--json`` (same method, sparsity, allocation, refine and protocol) are skipped, so
an interrupted grid resumes where it stopped.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from typing import Any

from benchmarks.host_clock import Clock
from benchmarks.records import emit
from toolkit.api import RunConfig, prune_model

VARIANTS = (("uniform", None), ("owl", None), ("owl", "dsnot"), ("uniform", "dsnot"))


def done_keys(path: str | None) -> set[tuple[str, str, str, str, int | None]]:
    """The (method, sparsity, allocation, refine, windows) of the runs already recorded in ``path``."""
    if not path or not Path(path).is_file():
        return set()
    keys = set()
    for line in Path(path).read_text().splitlines():
        r = json.loads(line) if line.strip() else {}
        if r.get("benchmark") == "allocation":  # the file also holds the recoveries of its runs
            keys.add((r["method"], r["sparsity"], r["allocation"], str(r["refine"]), r["eval_windows"]))
    return keys


def record(result: dict[str, Any], start: Clock, end: Clock, eval_windows: int | None) -> dict[str, Any]:
    """One JSON object for a finished run (what the docs table reads); wall, CPU and steal seconds of the run."""
    phases = result.get("phases", {})
    plan, refine = result["allocation"], result.get("refine") or {}
    return {
        "benchmark": "allocation", "model": result["model"], "method": result["method"],
        "sparsity": result["sparsity"], "allocation": plan["label"], "refine": refine.get("label"),
        "eval_windows": eval_windows, "ppl": result["ppl"], "dense_ppl": result["dense_ppl"],
        "achieved_sparsity": result["achieved_sparsity"], "ratios": plan.get("ratios"),
        "outlier_ratios": plan.get("outlier_ratios"), "dsnot_swaps": refine.get("swaps"),
        "rel_error_before_refine": refine.get("rel_error_before_mean"),
        "rel_error_after_refine": refine.get("rel_error_after_mean"),
        "prune_seconds": round(result["prune_seconds"], 2), "plan_seconds": round(phases.get("plan", 0.0), 2),
        "refine_seconds": round(phases.get("refine", 0.0), 2), "total_seconds": round(end.wall - start.wall, 2),
        **end.since(start),
        "peak_rss_mb": result.get("peak_rss_mb"), "device": result["device"], "protocol": result["protocol"],
        "run_dir": result["run_dir"], "versions": result["versions"],
    }


def main() -> None:
    """Run the grid methods × sparsities × variants and print (and append) one JSON object per run."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", default=["wanda", "sparsegpt", "fista"])
    parser.add_argument("--sparsities", nargs="+", default=["70%", "60%"])
    parser.add_argument("--variants", nargs="+", default=[f"{a}+{r}" for a, r in VARIANTS],
                        help="allocation+refine pairs, e.g. owl+dsnot, uniform+None")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--nsamples", type=int, default=32)
    parser.add_argument("--seqlen", type=int, default=512)
    parser.add_argument("--eval-windows", type=int, default=None, help="default: all windows")
    parser.add_argument("--save-model", action="store_true", help="save each pruned model (for `toolkit recover`)")
    parser.add_argument("--out", default="runs_bench")
    parser.add_argument("--json", default=None, help="append the objects to this JSON-lines file (and resume from it)")
    args = parser.parse_args()
    done = done_keys(args.json)
    for sparsity, method, variant in itertools.product(args.sparsities, args.methods, args.variants):
        allocation, _, refine_text = variant.partition("+")
        refine = None if refine_text in ("", "None", "none") else refine_text
        config = RunConfig(model=args.model, method=method, sparsity=sparsity, allocation=allocation, refine=refine,
                           nsamples=args.nsamples, seqlen=args.seqlen, eval_windows=args.eval_windows,
                           eval_dense=True, save_model=args.save_model, out_dir=args.out)
        key = (method, str(config.sparsity), str(config.to_dict()["allocation"]),
               str(config.to_dict()["refine"]), args.eval_windows)
        if key in done:
            continue
        start = Clock.now()
        result = prune_model(config)
        emit(record(result, start, Clock.now(), args.eval_windows), args.json)


if __name__ == "__main__":
    main()
