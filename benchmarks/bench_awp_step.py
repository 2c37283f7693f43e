"""AWP's step-size variants on the CPU protocol, without re-evaluating the dense model every run.

The same records as ``bench_prune`` (``"benchmark": "prune"``, same fields, so the results tables read
both), for runs written as in ``bench_prune`` (``awp@int4:g128:step=spectral``), but with
``eval_dense`` off: the dense perplexity of the protocol is already in ``cpu_awp_full.jsonl`` (14.70),
and on a shared 2-core machine its 210-window evaluation costs as much as the run being measured.
``dense_ppl`` is then null.

    python -m benchmarks.bench_awp_step --runs "awp@int4:g128:step=backtracking" \\
        --json benchmarks/results/awp_step_cpu.jsonl
"""

from __future__ import annotations

import argparse
from typing import Any, cast

from benchmarks.bench_prune import parse_run, split_spec
from benchmarks.host_clock import Clock
from benchmarks.records import emit
from toolkit.api import RunConfig, prune_model


def main() -> None:
    """Run every ``--runs`` entry (all 210 windows unless ``--eval-windows``) and print one JSON object each."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", required=True)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--eval-windows", type=int, default=None)
    parser.add_argument("--out", default="runs")
    parser.add_argument("--json", default=None, help="also append the objects to this JSON-lines file")
    args = parser.parse_args()
    for spec in args.runs:
        method, sparsity, options = parse_run(spec)
        fields = split_spec(sparsity, options)
        spec_fields = cast(dict[str, Any], fields)  # text, parsed by RunConfig
        config = RunConfig(model=args.model, method=method, **spec_fields, options=options, nsamples=32, seqlen=512,
                           seed=0, eval_seqlen=512, eval_windows=args.eval_windows, eval_data="wiki",
                           eval_dense=False, out_dir=args.out)
        start = Clock.now()
        result = prune_model(config)
        end = Clock.now()
        emit({"benchmark": "prune", "run": spec, "model": result["model"], "method": method, "sparsity": sparsity,
              "options": options, "quant": fields["quant"], "unit": fields["unit"],
              "propagate": result["engine"]["propagate"], "achieved_sparsity": result["achieved_sparsity"],
              "ppl": result["ppl"], "dense_ppl": result["dense_ppl"],
              "prune_seconds": round(result["prune_seconds"], 2),
              "total_seconds": round(end.wall - start.wall, 2), **end.since(start),
              "peak_rss_mb": round(result["peak_rss_mb"], 1), "accounting": result.get("accounting"),
              "precision": result.get("precision"), "phases": result.get("phases"), "device": result["device"],
              "protocol": result["protocol"], "run_dir": result["run_dir"], "versions": result["versions"]},
             args.json)


if __name__ == "__main__":
    main()
