"""Streamed prune + quantization + evaluation of a real-shaped model: host memory against the goal.

    python -m benchmarks.bench_stream_quant --shape llama-2-7b --layers 4 --nsamples 2 --seqlen 256 \\
        --quant int4:g128 --eval-windows 2 --eval-seqlen 256 --json benchmarks/results/scale_stream_quant_cpu.jsonl

The run is :mod:`benchmarks.bench_scale`'s (the same random-weight checkpoint built in a child process, the same
RSS peak and timeline, the same floor), through ``toolkit.api.prune_model`` with ``stream=True``, ``--quant``
(each layer's linears written pack-quantized as the layer is written) and a streamed perplexity of the written
checkpoint on the embedded ``wiki`` text (``--in-memory``: the same run without ``--stream``, the model held in
memory and saved at the end, its perplexity evaluated in memory). One JSON line
(``"benchmark": "scale_stream_quant"``): bench_scale's fields, plus the grid, the checkpoint's format and bits per
weight, the perplexity and the evaluation's seconds, and the host-memory goal: 1.25 × the bf16 weights of the
model cut to one decoder layer (embeddings, head and one layer) + 1.2 GiB, with ``rss_peak_mib`` against it.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from benchmarks import bench_scale
from benchmarks.bench_scale import BenchError, ScaleOptions
from benchmarks.records import emit
from benchmarks.scale_configs import SHAPES, param_count, shape_config

MIB = 2**20
GOAL_OVERHEAD_MIB = 1.2 * 1024


def goal_mib(name: str) -> float:
    """1.25 × the bf16 bytes of ``name`` cut to one decoder layer, + 1.2 GiB, in MiB."""
    return 1.25 * 2 * param_count(shape_config(name, 1)) / MIB + GOAL_OVERHEAD_MIB


def measure(name: str, shape: dict[str, Any], opts: ScaleOptions, quant: str, evaluation: dict[str, Any]
            ) -> dict[str, Any]:
    """Build, prune + quantize streamed, evaluate streamed; the JSON object of the run."""
    device = bench_scale.resolve_device(opts.device)
    folder, runs, base, made = bench_scale._workspace(opts, name, shape)
    try:
        kwargs = bench_scale.run_config_kwargs(folder, opts, device, runs)
        kwargs.update(quant=quant, stream=opts.stream, eval_data="wiki", **evaluation)
        kwargs["sparsity"] = None if opts.sparsity in ("", "none") else opts.sparsity
        built = bench_scale.build(shape, folder, opts)
        start = time.perf_counter()
        result, memory = bench_scale.prune(kwargs, device)
        total = time.perf_counter() - start
        record = bench_scale.make_record(name, shape, opts, result, memory)
        record["build"] = {key: built.get(key) for key in ("seconds", "bytes", "reused", "subprocess")}
        record = bench_scale.add_floor(record, bench_scale.floor_record(shape, opts, device))
    finally:
        if not opts.keep:
            bench_scale._cleanup(folder, runs, base, made)
    checkpoint = result.get("checkpoint") or {}
    goal = goal_mib(name)
    return {**record, "benchmark": "scale_stream_quant", "quant": quant, "sparsity": kwargs["sparsity"],
            "checkpoint_format": checkpoint.get("format"), "bits_per_weight": checkpoint.get("bits_per_weight"),
            "stored_as": (result.get("bought") or {}).get("stored_as"), "ppl": result.get("ppl"),
            "evaluation": {**evaluation, "dataset": "wiki", "streamed": opts.stream},
            "run_seconds": round(total, 3), "eval_seconds": round(total - float(result["prune_seconds"]), 3),
            "goal_mib": round(goal, 1), "goal": "1.25 x bf16 weights of the 1-layer model + 1.2 GiB",
            "within_goal": bool(record["rss_peak_mib"] <= goal)}


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run one measured streamed prune + quantization + evaluation."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=list(SHAPES), required=True)
    parser.add_argument("--layers", type=int, default=None, help="keep the first N decoder layers (default all)")
    parser.add_argument("--method", default="rtn", help="rtn, gptq or awp")
    parser.add_argument("--sparsity", default="none", help="none (quantize only), or a sparsity for awp")
    parser.add_argument("--quant", default="int4:g128")
    parser.add_argument("--nsamples", type=int, default=2)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--eval-windows", type=int, default=2)
    parser.add_argument("--eval-seqlen", type=int, default=256)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cpu")
    parser.add_argument("--workdir", default=None, help="where the checkpoint and runs go (default: a temp dir)")
    parser.add_argument("--in-memory", action="store_true",
                        help="the same run in memory (no --stream): --save-model --quant, evaluation of the model held")
    parser.add_argument("--json", default=None, help="also append the JSON line to this file")
    args = parser.parse_args(argv)
    from toolkit.errors import ToolkitError

    opts = ScaleOptions(method=args.method, sparsity=args.sparsity, nsamples=args.nsamples, seqlen=args.seqlen,
                        device=args.device, save_model=True, stream=not args.in_memory, workdir=args.workdir)
    evaluation = {"eval_windows": args.eval_windows, "eval_seqlen": args.eval_seqlen}
    try:
        record = measure(args.shape, shape_config(args.shape, args.layers), opts, args.quant, evaluation)
    except (BenchError, ToolkitError, ValueError) as exc:
        parser.exit(2, f"bench_stream_quant: error: {exc}\n")
    emit(record, args.json)


if __name__ == "__main__":
    main()
