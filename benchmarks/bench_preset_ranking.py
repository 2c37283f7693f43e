"""Does a named protocol rank the pruning methods as the CPU protocol does? One record a run, on its sizes.

Runs every ``--runs`` entry (written as for ``bench_prune.py``: ``method@sparsity[:key=value,…]``) under
the calibration and evaluation sizes of ``--protocol`` (``toolkit/run/protocols.py``), dense and pruned
wiki perplexity on that protocol's windows. The records have ``bench_prune.py``'s fields plus
``"benchmark": "preset_ranking"`` and ``"preset"``; ``benchmarks/results_presets.py`` sets the ranking next
to the CPU protocol's records.

    python -m benchmarks.bench_preset_ranking --protocol quick --runs magnitude@50% wanda@50% \\
        sparsegpt@50% thanos@50% fista@50% fista@50%:bisection=geometric \\
        --json benchmarks/results/quick_ranking.jsonl
"""

from __future__ import annotations

import argparse

from benchmarks.bench_prune import parse_run, split_spec
from benchmarks.host_clock import Clock
from benchmarks.records import emit
from toolkit.api import RunConfig, prune_model
from toolkit.run.protocols import PROTOCOLS, get_protocol

RUNS = ["magnitude@50%", "wanda@50%", "sparsegpt@50%", "thanos@50%", "fista@50%", "fista@50%:bisection=geometric"]


def main() -> None:
    """Run every ``--runs`` entry under the protocol's sizes and emit one record each."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--protocol", default="quick", choices=tuple(PROTOCOLS))
    parser.add_argument("--runs", nargs="+", default=RUNS)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seed", type=int, default=0, help="calibration sampling seed (the protocols' is 0)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=None,
                        help="intra-op threads (1 on a shared CPU: two threads spin against a busy neighbour)")
    parser.add_argument("--out", default="runs")
    parser.add_argument("--json", default=None, help="also append the records to this JSON-lines file")
    args = parser.parse_args()
    preset = get_protocol(args.protocol)
    for spec in args.runs:
        method, sparsity, options = parse_run(spec)
        fields = split_spec(sparsity, options)
        config = RunConfig(model=args.model, method=method, **fields, options=options, nsamples=preset.nsamples,
                           seqlen=preset.seqlen, seed=args.seed, eval_seqlen=preset.eval_seqlen,
                           eval_windows=preset.eval_windows, eval_data="wiki", eval_dense=True, device=args.device,
                           out_dir=args.out, threads=args.threads)
        start = Clock.now()
        result = prune_model(config)
        end = Clock.now()
        emit({
            "benchmark": "preset_ranking", "preset": preset.name, "run": spec, "model": result["model"],
            "method": method, "sparsity": sparsity, "options": options, "quant": fields["quant"],
            "unit": fields["unit"], "propagate": result["engine"]["propagate"],
            "achieved_sparsity": result["achieved_sparsity"], "ppl": result["ppl"], "dense_ppl": result["dense_ppl"],
            "prune_seconds": round(result["prune_seconds"], 2), "total_seconds": round(end.wall - start.wall, 2),
            **end.since(start), "peak_rss_mb": round(result["peak_rss_mb"], 1),
            "precision": result.get("precision"), "phases": result.get("phases"), "device": result["device"],
            "protocol": result["protocol"], "run_dir": result["run_dir"], "versions": result["versions"],
        }, args.json)


if __name__ == "__main__":
    main()
