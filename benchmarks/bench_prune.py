"""Quality and speed of whole-model pruning on the embedded model (prints JSON, one object a run).

Protocol (the CPU protocol of the README): calibration wiki train, 32 × 512 tokens, seed 0;
evaluation wiki test, seqlen 512, all windows (``--eval-windows N`` for a quick look, and then the
JSON says so). Every run is also recorded in the run store (``--out``).

    python -m benchmarks.bench_prune --runs wanda@50% sparsegpt@50% magnitude@2:4 \
        "fista@50%:warm_start=wanda" --json benchmarks/results/cpu.json

A run is written ``method@sparsity[+quant][:key=value,key=value]``: ``awp@50%+int4``,
``rtn@int3`` (quantization only), ``numerical@structured:30%:unit=heads`` (``unit`` and ``quant``
given as options go to the spec, not to the method; so does ``permute=1``: ``wanda@2:4:permute=1``).

``--no-dense`` leaves the dense perplexity out (``dense_ppl`` null) where the protocol's is already
recorded: on a shared 2-core machine its 210-window evaluation costs as much as the run measured
(AWP's step-size runs, ``benchmarks/results/awp_step_cpu.jsonl``).
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.host_clock import Clock
from benchmarks.records import emit
from toolkit.api import RunConfig, prune_model


def parse_run(text: str) -> tuple[str, str, dict[str, str]]:
    """``fista@50%:warm_start=wanda,K=20`` → ("fista", "50%", {"warm_start": "wanda", "K": "20"})."""
    method, _, rest = text.partition("@")
    sparsity, opts = rest, ""
    head, sep, tail = rest.rpartition(":")
    if sep and "=" in tail:  # options follow the last ":" ("2:4" and "structured:30%" have none)
        sparsity, opts = head, tail
    options = dict(item.split("=", 1) for item in opts.split(",") if item)
    return method, sparsity or "50%", options


def split_spec(sparsity: str, options: dict[str, str]) -> dict[str, str | None]:
    """The spec fields of a run: ``50%+int4`` → sparsity 50%, quant int4; ``int3`` → quant only; a
    ``unit`` or ``quant`` option is moved from ``options`` into the spec."""
    target, _, quant = sparsity.partition("+")
    if target.startswith("int"):
        target, quant = "", target
    return {"sparsity": target or None, "quant": quant or options.pop("quant", None),
            "unit": options.pop("unit", None)}


def layer_error_summary(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run's relative layer output error ‖ΔW X‖/‖W X‖: its sample, per layer and the mean over layers.

    ``record`` is result.json's ``layer_error``; ``mean`` is null where nothing was measured (``--error none``).
    """
    if record is None:
        return None
    values = record.get("per_layer") or []
    mean = sum(values) / len(values) if values else None
    return {"mode": record.get("mode"), "windows": record.get("windows"), "mean": mean, "per_layer": values or None}


def main() -> None:
    """Run every ``--runs`` entry and print one JSON object per run."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", default=["magnitude@50%", "wanda@50%", "sparsegpt@50%"])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--nsamples", type=int, default=32)
    parser.add_argument("--seqlen", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0, help="calibration sampling seed (the protocol's is 0)")
    parser.add_argument("--eval-seqlen", type=int, default=512)
    parser.add_argument("--eval-windows", type=int, default=None)
    parser.add_argument("--no-eval", action="store_true", help="speed only: prune, skip every perplexity")
    parser.add_argument("--no-dense", action="store_true", help="skip the dense perplexity (dense_ppl null)")
    parser.add_argument("--propagate", default=None, help="pruned | dense; default: the method's")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto", help="storage dtype: auto | float32 | bfloat16 | float16")
    parser.add_argument("--forward-dtype", default="auto", help="the layers' passes: auto | fp32 | bf16")
    parser.add_argument("--calibrate", default="auto", help="auto | always: a data-free method's calibration pass "
                        "skipped (auto) or run anyway (always, the path before data-free runs existed)")
    parser.add_argument("--out", default="runs")
    parser.add_argument("--json", default=None, help="also append the objects to this JSON-lines file")
    args = parser.parse_args()
    for spec in args.runs:
        method, sparsity, options = parse_run(spec)
        fields = split_spec(sparsity, options)
        permute = options.pop("permute", "") in ("1", "true", "on")  # the spec's, not the method's
        config = RunConfig(model=args.model, method=method, **fields, permute=permute, options=options,
                           nsamples=args.nsamples, seqlen=args.seqlen, seed=args.seed, eval_seqlen=args.eval_seqlen,
                           eval_windows=args.eval_windows, eval_data=None if args.no_eval else "wiki",
                           eval_dense=not (args.no_eval or args.no_dense), device=args.device, propagate=args.propagate,
                           out_dir=args.out, dtype=args.dtype, forward_dtype=args.forward_dtype,
                           calibrate=args.calibrate)
        start = Clock.now()
        result = prune_model(config)
        end = Clock.now()
        record = {
            "benchmark": "prune", "run": spec, "model": result["model"], "method": method, "sparsity": sparsity,
            "options": options, "quant": fields["quant"], "unit": fields["unit"],
            "permute": permute,
            "propagate": result["engine"]["propagate"], "calibrate": args.calibrate,
            "calibration_used": result["protocol"]["calibration"].get("used", True),
            "achieved_sparsity": result["achieved_sparsity"],
            "ppl": result["ppl"], "dense_ppl": result["dense_ppl"], "prune_seconds": round(result["prune_seconds"], 2),
            "total_seconds": round(end.wall - start.wall, 2), **end.since(start),
            "peak_rss_mb": round(result["peak_rss_mb"], 1),
            "accounting": result.get("accounting"),
            "layer_error": layer_error_summary(result.get("layer_error")),
            "precision": result.get("precision"), "phases": result.get("phases"),
            "device": result["device"], "protocol": result["protocol"], "run_dir": result["run_dir"],
            "versions": result["versions"],
        }
        emit(record, args.json)


if __name__ == "__main__":
    main()
