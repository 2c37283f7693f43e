"""One process vs ``torchrun --nproc-per-node 2 … --distributed``, and bf16 vs fp32 forward passes (prints JSON).

Protocol: the CPU protocol of the README on the embedded model (calibration wiki train 32 × 512,
seed 0; perplexity on wiki test, seqlen 512, all windows). Each run is the CLI in a subprocess with
the machine's default thread settings (torchrun gives each rank OMP_NUM_THREADS=1), run one after
another; ``wall_seconds`` is the whole command (loading, evaluation and, under torchrun, the
ranks' start), ``prune_seconds`` the engine's own time.

    python -m benchmarks.bench_distributed --json benchmarks/results/cpu_distributed.jsonl [--eval-windows N] \
        [--threads 1]

With ``--threads 1`` the one-process run uses one thread, as each torchrun rank does, so both sum in
the same order and the masks can be compared bit for bit.

Lines: ``distributed`` (sparsegpt 50%, propagate dense: masks identical? ppl difference? times)
and ``forward_dtype`` (wanda 50%: ppl and prune seconds in fp32 and bf16).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PROTOCOL = ["--model", "smollm2-135m", "--sparsity", "50%", "--calib", "wiki", "--nsamples", "32", "--seqlen", "512",
            "--seed", "0", "--eval", "wiki", "--eval-seqlen", "512"]


def _cli(args: list[str], out: Path, name: str, launcher: list[str] | None = None) -> dict[str, Any]:
    """Run ``python -m toolkit prune`` (or under ``launcher``); the result dict plus the command's wall time."""
    result_file = out / f"{name}.json"
    command = [*(launcher or [sys.executable]), "-m", "toolkit", "prune", *PROTOCOL, *args,
               "--out", str(out / "runs"), "--json", str(result_file)]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # the machine's defaults
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    result = json.loads(result_file.read_text())
    result["wall_seconds"] = time.perf_counter() - start
    return result


def _masks(run_dir: str) -> dict[str, np.ndarray]:
    return {p.name: np.load(p)["bits"] for p in sorted(Path(run_dir, "masks").glob("*.npz"))}


def distributed(out: Path, protocol: list[str]) -> dict[str, Any]:
    """sparsegpt 50% with --propagate dense: one process against two gloo ranks."""
    args = [*protocol, "--method", "sparsegpt", "--propagate", "dense"]
    one = _cli(args, out, "one")
    torchrun = [str(Path(sys.executable).with_name("torchrun")), "--nproc-per-node", "2"]
    two = _cli([*args, "--distributed"], out, "two", launcher=torchrun)
    masks_one, masks_two = _masks(one["run_dir"]), _masks(two["run_dir"])
    differing = sum(int(np.count_nonzero(np.unpackbits(masks_one[k]) != np.unpackbits(masks_two[k])))
                    for k in masks_one)
    return {"benchmark": "distributed", "run": "sparsegpt@50% propagate=dense", "model": "smollm2-135m",
            "linears": len(masks_one), "masks_identical": masks_one.keys() == masks_two.keys() and differing == 0,
            "mask_entries_differing": differing, "ppl_one": one["ppl"]["wiki"], "ppl_two": two["ppl"]["wiki"],
            "ppl_abs_diff": abs(one["ppl"]["wiki"] - two["ppl"]["wiki"]),
            "devices_one": one["devices"], "devices_two": two["devices"],
            "prune_seconds_one": one["prune_seconds"], "prune_seconds_two": two["prune_seconds"],
            "wall_seconds_one": one["wall_seconds"], "wall_seconds_two": two["wall_seconds"],
            "cpu_cores": os.cpu_count(), "threads": protocol[protocol.index("--threads") + 1]
            if "--threads" in protocol else "default", "note": "machine shared", "protocol": one["protocol"]}


def forward_dtype(out: Path, protocol: list[str]) -> dict[str, Any]:
    """wanda 50%: fp32 against bf16 forward passes."""
    runs = {dtype: _cli([*protocol, "--method", "wanda", "--forward-dtype", dtype], out, f"wanda-{dtype}")
            for dtype in ("fp32", "bf16")}
    events = [json.loads(line) for line in Path(runs["bf16"]["run_dir"], "events.jsonl").read_text().splitlines()]
    warnings = [event["message"] for event in events if event["type"] == "Warning"]
    fp32, bf16 = runs["fp32"], runs["bf16"]
    return {"benchmark": "forward_dtype", "run": "wanda@50%", "model": "smollm2-135m",
            "ppl_fp32": fp32["ppl"]["wiki"], "ppl_bf16": bf16["ppl"]["wiki"],
            "ppl_rel_change": bf16["ppl"]["wiki"] / fp32["ppl"]["wiki"] - 1,
            "prune_seconds_fp32": fp32["prune_seconds"], "prune_seconds_bf16": bf16["prune_seconds"],
            "bf16_warnings": warnings, "device": fp32["devices"], "note": "machine shared",
            "protocol": fp32["protocol"]}


def main() -> None:
    """Run the chosen benchmarks one after another and print one JSON object per line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("distributed", "forward_dtype"), default=None)
    parser.add_argument("--json", default=None, help="append the JSON lines to this file")
    parser.add_argument("--eval-windows", type=int, default=None, help="score only the first N windows")
    parser.add_argument("--threads", type=int, default=None,
                        help="--threads for every run (1: the one process sums in the ranks' order)")
    args = parser.parse_args()
    protocol = [] if args.eval_windows is None else ["--eval-windows", str(args.eval_windows)]
    protocol += [] if args.threads is None else ["--threads", str(args.threads)]
    out = Path(tempfile.mkdtemp(prefix="bench-distributed-"))
    try:
        for bench in (forward_dtype, distributed):
            if args.only in (None, bench.__name__):
                line = json.dumps(bench(out, protocol))
                print(line, flush=True)
                if args.json:
                    with open(args.json, "a", encoding="utf-8") as handle:
                        handle.write(line + "\n")
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
