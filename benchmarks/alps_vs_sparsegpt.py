"""ALPS and SparseGPT on the same statistics: the relative reconstruction error of every linear.

The first ``--layers`` decoder layers of the model are pruned by the engine with ALPS (its result is
written back, so layer i+1 calibrates on ALPS's pruned layer i, as in an ALPS run); at every linear,
SparseGPT solves the very same weight and Gram as well, and both errors ‖ΔW X‖/‖W X‖ are measured the
engine's way (``toolkit/engine/solve.py`` ``reconstruction_errors``). One JSON line per linear and
target; ``--png`` draws them (one panel per target, one pair of bars per linear)::

    OMP_NUM_THREADS=1 nice -n 10 python -m benchmarks.alps_vs_sparsegpt --layers 3 --nsamples 8 --seqlen 256 \\
        --targets 50% 2:4 --json benchmarks/results/cpu_alps_vs_sparsegpt.jsonl \\
        --png docs/methods/alps_vs_sparsegpt.png

``--plot-only`` redraws the PNG from the JSON file without pruning.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import time
from pathlib import Path
from typing import Any

from benchmarks.records import emit
from toolkit.run.provenance import git_head


def measure(args: argparse.Namespace, sparsity: str) -> list[dict[str, Any]]:
    """Prune the first ``args.layers`` layers with ALPS at ``sparsity``; both solvers' errors per linear."""
    import torch

    from toolkit.data.text import CalibSpec, calibration_windows, load_tokens
    from toolkit.engine.prune import prune_layers
    from toolkit.engine.solve import reconstruction_errors
    from toolkit.engine.state import EngineConfig
    from toolkit.methods import get_method
    from toolkit.models.layers import decoder_layers
    from toolkit.models.load import load_model
    from toolkit.run.pipeline import bos_id
    from toolkit.spec.targets import parse_sparsity

    loaded = load_model(args.model)
    layers = decoder_layers(loaded.model)
    del layers[args.layers:]  # only the first layers: the rest are never run
    setattr(loaded.model.config, "num_hidden_layers", args.layers)  # noqa: B010 - a transformers config
    calib = calibration_windows(load_tokens("wiki", "train", loaded.codec),
                                CalibSpec("wiki", args.nsamples, args.seqlen, args.seed), bos_id(loaded))
    alps, sparsegpt = get_method("alps"), get_method("sparsegpt")
    alps_cfg, sparsegpt_cfg = alps.make_config({}), sparsegpt.make_config({})
    rows: list[dict[str, Any]] = []

    def both(W: torch.Tensor, stats: Any, target: Any, cfg: Any, ctx: Any) -> Any:
        start = time.perf_counter()
        ours = alps.fn(W, stats, target, alps_cfg, ctx)
        middle = time.perf_counter()
        theirs = sparsegpt.fn(W, stats, target, sparsegpt_cfg, dataclasses.replace(ctx, emit=lambda e: None))
        end = time.perf_counter()
        rows.append({"layer": ctx.layer, "linear": ctx.name, "shape": list(W.shape),
                     "alps_rel_error": reconstruction_errors(W, ours.weight, stats)[0],
                     "sparsegpt_rel_error": reconstruction_errors(W, theirs.weight, stats)[0],
                     "alps_seconds": round(middle - start, 3), "sparsegpt_seconds": round(end - middle, 3),
                     "alps_stop": ours.info.get("stop_reason"), "alps_iters": ours.info.get("admm_iters")})
        return ours

    spec = dataclasses.replace(alps, fn=both)
    target = parse_sparsity(sparsity)
    prune_layers(loaded.model, calib, spec, target, alps_cfg, cfg=EngineConfig(device="cpu"), emit=lambda e: None)
    protocol = {"model_label": args.model, "threads": torch.get_num_threads(), "layers": args.layers,
                "calibration": {"source": "wiki", "split": "train", "nsamples": args.nsamples, "seqlen": args.seqlen,
                                "seed": args.seed}}  # the shape benchmarks/results_read.py reads
    return [{"bench": "alps_vs_sparsegpt", "target": sparsity, **row, "protocol": protocol, "git": git_head() or None,
             "machine": platform.machine(), "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())}
            for row in rows]


def draw(records: list[dict[str, Any]], png: str) -> None:
    """One panel per target: ALPS's and SparseGPT's relative error per linear (the newest record of each)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    latest: dict[tuple[str, int, str], dict[str, Any]] = {}
    for record in records:
        latest[(record["target"], record["layer"], record["linear"])] = record
    targets = list(dict.fromkeys(key[0] for key in latest))
    fig, axes = plt.subplots(len(targets), 1, figsize=(11, 3.2 * len(targets)), squeeze=False)
    for ax, target in zip(axes[:, 0], targets, strict=True):
        rows = [record for key, record in latest.items() if key[0] == target]  # the engine's order
        labels = [f"L{r['layer']} {r['linear'].split('.')[-1]}" for r in rows]
        xs = range(len(rows))
        ax.bar([x - 0.2 for x in xs], [r["sparsegpt_rel_error"] for r in rows], 0.4, label="SparseGPT",
               color="#9aa5b1")
        ax.bar([x + 0.2 for x in xs], [r["alps_rel_error"] for r in rows], 0.4, label="ALPS", color="#1f6feb")
        ax.set_xticks(list(xs), labels, rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("‖ΔW X‖ / ‖W X‖")
        ax.set_title(f"{target}: relative reconstruction error per linear, same statistics", fontsize=10)
        ax.legend(fontsize=8)
    protocol = records[-1]["protocol"]
    calibration = protocol["calibration"]
    fig.suptitle(f"{protocol['model_label']}, decoder layers 0-{protocol['layers'] - 1} (ALPS written back), "
                 f"calibration {calibration['nsamples']} × {calibration['seqlen']} wiki", fontsize=10)
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main() -> None:
    """Measure each ``--targets`` entry (or only redraw with ``--plot-only``) and print one JSON line per linear."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--layers", type=int, default=3, help="the first N decoder layers are pruned")
    parser.add_argument("--targets", nargs="+", default=["50%", "2:4"])
    parser.add_argument("--nsamples", type=int, default=8)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="append the lines to this JSON-lines file")
    parser.add_argument("--png", default=None, help="draw the records of --json into this PNG")
    parser.add_argument("--plot-only", action="store_true", help="redraw --png from --json without pruning")
    args = parser.parse_args()
    if not args.plot_only:
        for sparsity in args.targets:
            for record in measure(args, sparsity):
                emit(record, args.json)
    if args.png and args.json:
        records = [json.loads(line) for line in Path(args.json).read_text().splitlines() if line.strip()]
        draw([r for r in records if r.get("bench") == "alps_vs_sparsegpt"], args.png)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
