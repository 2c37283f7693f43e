"""What FISTAPruner's λ search did in finished runs: one summary record a run, read from its events.jsonl.

For each run folder (``prune --out DIR`` or ``bench_prune.py --out DIR``) of method ``fista``: the λ search
(``bisection`` option), the calibration size, how many linears the rounded FISTA solution replaced the warm
start in, the outer rounds and how many of them had FISTA zero every weight before rounding (λ too large),
the median of λ where a round improved, and the mean per-linear relative error of the warm start and of the
result (``info`` of ``SublayerPruned``).

    python -m benchmarks.bench_fista_lambda runs/20261126-224455-fista-50-fc42 ... \\
        --json benchmarks/results/fista_lambda_trace.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.records import emit

ALL_ZERO = 0.999  # a round whose FISTA solution is at least this sparse before rounding zeroed (almost) everything


def summarize(folder: Path) -> dict[str, Any]:
    """The λ-search summary of one fista run folder."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if config.get("method") != "fista":
        raise SystemExit(f"{folder}: method {config.get('method')!r}, not fista")
    linears, rounds = [], []
    finished = False
    with open(folder / "events.jsonl", encoding="utf-8") as handle:
        for line in handle:
            event = json.loads(line)
            kind = event.get("type")
            if kind == "SublayerPruned":
                linears.append(event.get("info") or {})
            elif kind == "LambdaStep":
                rounds.append(event)
            finished = finished or kind == "RunFinished"
    improving = [r["lam"] for r in rounds if r["improved"]]
    options = config.get("options") or {}
    return {
        "benchmark": "fista_lambda", "run_id": folder.name, "finished": finished,
        "bisection": options.get("bisection", "arithmetic"), "sparsity": config.get("sparsity"),
        "nsamples": config.get("nsamples"), "seqlen": config.get("seqlen"),
        "linears": len(linears), "fista_chosen": sum(1 for info in linears if info.get("chosen") == "fista"),
        "rounds": len(rounds), "rounds_all_zero": sum(1 for r in rounds if r["sparsity_before_rounding"] >= ALL_ZERO),
        "rounds_improved": len(improving),
        "median_improving_lam": statistics.median(improving) if improving else None,
        "mean_warm_start_error": _mean(info.get("warm_start_error") for info in linears),
        "mean_final_error": _mean(info.get("final_error") for info in linears),
    }


def _mean(values: Any) -> float | None:
    found = [float(v) for v in values if v is not None]
    return statistics.fmean(found) if found else None


def main() -> None:
    """Summarize every run folder given."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run folders of fista runs")
    parser.add_argument("--json", default=None, help="also append the records to this JSON-lines file")
    args = parser.parse_args()
    for run in args.runs:
        emit(summarize(Path(run)), args.json)


if __name__ == "__main__":
    main()
