"""Fingerprint of a pruned model's weights, to show that a refactor left every method's numbers alone.

For each ``method@sparsity`` run (the CPU protocol's calibration, no evaluation) the pruned model is
saved, and one JSON object is printed per run: a SHA-256 over every decoder linear's weight bytes,
the keep-mask digest, and per-linear float sums, so two commits can be compared exactly (same
digest ⇒ same weights ⇒ same perplexity) or, where float summation order differs, by how far
apart they are::

    python -m benchmarks.weights_digest --runs wanda@50% sparsegpt@2:4 awp@50%+int4 --json before.jsonl
    python -m benchmarks.weights_digest --compare before.jsonl after.jsonl

``--model tiny-llama --nsamples 16 --seqlen 128`` fingerprints the same runs on a tiny model in seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

from benchmarks.bench_prune import parse_run, split_spec


def digest(model_dir: Path) -> dict:
    """SHA-256 of the decoder linears' tensors (sorted by name; a quantized checkpoint's packed codes,
    scales and zero points) and each one's sum of |w|."""
    from safetensors import safe_open

    sha = hashlib.sha256()
    sums: dict[str, float] = {}
    zeros = 0
    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as handle:
        for name in sorted(handle.keys()):
            if ".layers." not in name or "proj." not in name:  # weight, or packed codes, scales, zero points
                continue
            tensor = handle.get_tensor(name).float().contiguous()
            sha.update(name.encode())
            sha.update(tensor.numpy().tobytes())
            sums[name] = float(tensor.abs().sum())
            zeros += int((tensor == 0).sum()) if name.endswith(".weight") else 0
    return {"weights_sha256": sha.hexdigest(), "abs_sums": sums, "zeros": zeros}


def run(spec: str, out: str, protocol: argparse.Namespace) -> dict:
    """Prune ``protocol.model`` with ``spec`` (no evaluation), save, fingerprint, delete the checkpoint.

    ``protocol.nsamples``/``protocol.seqlen`` of None keep the CPU protocol's calibration (32 × 512).
    """
    from toolkit.api import RunConfig, prune_model

    method, sparsity, options = parse_run(spec)
    fields = split_spec(sparsity, options)  # awp@50%+int4, rtn@int4, numerical@structured:30%:unit=heads
    sizes = {k: v for k, v in (("nsamples", protocol.nsamples), ("seqlen", protocol.seqlen)) if v is not None}
    config = RunConfig(model=protocol.model, method=method, options=options, eval_data=None,
                       out_dir=out, save_model=True, **fields, **sizes)
    result = prune_model(config)
    model_dir = Path(result["run_dir"]) / "model"
    record = {"run": spec, "achieved_sparsity": result["achieved_sparsity"],
              "prune_seconds": round(result["prune_seconds"], 2), **digest(model_dir),
              "git": result["versions"].get("git")}
    shutil.rmtree(model_dir)
    return record


def compare(before: str, after: str) -> None:
    """Print, per run, whether the weights are identical, else the largest relative |w| sum gap."""
    old = {r["run"]: r for r in map(json.loads, Path(before).read_text().splitlines())}
    for line in Path(after).read_text().splitlines():
        new = json.loads(line)
        ref = old.get(new["run"])
        if ref is None:
            continue
        gap = max(abs(new["abs_sums"][k] - v) / max(abs(v), 1e-30) for k, v in ref["abs_sums"].items())
        print(json.dumps({"run": new["run"], "identical": ref["weights_sha256"] == new["weights_sha256"],
                          "max_rel_abs_sum_gap": gap, "zeros_before": ref["zeros"], "zeros_after": new["zeros"]}))


def main() -> None:
    """Fingerprint ``--runs`` or ``--compare`` two JSON-lines files."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="*", default=[])
    parser.add_argument("--out", default="runs_bench")
    parser.add_argument("--json", default=None)
    parser.add_argument("--compare", nargs=2, default=None)
    parser.add_argument("--model", default="smollm2-135m", help="a tiny model checks a commit in seconds")
    parser.add_argument("--nsamples", type=int, default=None, help="calibration sequences (default: 32)")
    parser.add_argument("--seqlen", type=int, default=None, help="calibration tokens each (default: 512)")
    args = parser.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    for spec in args.runs:
        record = {**run(spec, args.out, args), "model": args.model}
        print(json.dumps({k: v for k, v in record.items() if k != "abs_sums"}), flush=True)
        if args.json:
            with open(args.json, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
