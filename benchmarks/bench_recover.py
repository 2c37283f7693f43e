"""Recovery fine-tuning of a saved run (prints JSON, one object a run; the recovery table of docs/results.md).

Protocol: the parent run's own, as ``python -m toolkit recover RUN`` uses it (calibration text and
seed of the parent, evaluation on the parent's windows before and after), with the recovery
defaults of docs/recover.md unless ``--steps`` says otherwise. The JSON object names the parent
(method, sparsity, allocation, refinement), the perplexity before and after, and the seconds of
each step (training, saving, both evaluations) beside the wall, CPU and steal seconds of the run.

    python -m benchmarks.bench_recover runs_bench/<run> --json benchmarks/results/allocation_cpu.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.host_clock import Clock
from benchmarks.records import emit
from toolkit.api import recover_model


def parent_label(run_dir: Path) -> str:
    """``method sparsity allocation [+ refine]`` of the parent run, from its config.json."""
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    allocation = config.get("allocation") or "uniform"
    label = f"{config.get('method')} {config.get('sparsity')} {allocation}"
    return f"{label} + {config['refine']}" if config.get("refine") else label


def record(result: dict[str, Any], parent: Path, start: Clock, end: Clock) -> dict[str, Any]:
    """One JSON object for a finished recovery."""
    before, after = result.get("ppl_before") or {}, result.get("ppl") or {}
    seconds = result.get("seconds") or {}
    return {
        "benchmark": "recover", "model": result["model"], "parent": parent_label(parent),
        "parent_run": result["parent"], "steps": result["options"]["steps"], "options": result["options"],
        "ppl_before": next(iter(before.values()), None), "ppl_after": next(iter(after.values()), None),
        "seconds": round(result["prune_seconds"], 2), "step_seconds": {k: round(v, 2) for k, v in seconds.items()},
        "total_seconds": round(end.wall - start.wall, 2), **end.since(start), "peak_rss_mb": result.get("peak_rss_mb"),
        "device": result["device"], "protocol": result["protocol"], "run_dir": result["run_dir"],
        "versions": result["versions"],
    }


def main() -> None:
    """Recover one run and print (and append) its JSON object."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run folder saved with --save-model")
    parser.add_argument("--steps", type=int, default=None, help="default: the recovery default (docs/recover.md)")
    parser.add_argument("--json", default=None, help="append the object to this JSON-lines file")
    args = parser.parse_args()
    settings = {} if args.steps is None else {"steps": args.steps}
    start = Clock.now()
    result = recover_model(run=args.run, **settings)
    emit(record(result, Path(args.run), start, Clock.now()), args.json)


if __name__ == "__main__":
    main()
