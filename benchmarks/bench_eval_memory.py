"""Peak memory of a perplexity evaluation: full-vocabulary logits per batch (before) vs the chunked
head of ``toolkit.evaluation.perplexity`` (after). Prints one JSON object.

Each implementation runs in its own process, on the same model and windows (wiki test, first
``--windows`` windows of ``--seqlen`` tokens, BOS where the model needs it). The evaluation's own
peak is measured by resetting the kernel's high-water mark (``/proc/self/clear_refs``) after the
model is loaded and reading ``VmHWM`` after the evaluation.

    python -m benchmarks.bench_eval_memory --model smollm2-135m --seqlen 1024 --windows 8
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from toolkit.data.text import eval_windows, load_tokens
from toolkit.evaluation.perplexity import perplexity
from toolkit.models.load import load_model
from toolkit.run.pipeline import bos_id
from toolkit.runtime.memory import keep_freed_memory
from toolkit.runtime.rss import status_kib


def _rss_mb(field: str) -> float:
    """``VmRSS`` or ``VmHWM`` of this process, MiB (``toolkit.runtime.rss.status_kib``)."""
    kib = status_kib(field)
    if kib is None:
        raise RuntimeError(f"no {field} in /proc/self/status")
    return kib / 1024


def full_logits_perplexity(model: torch.nn.Module, windows: torch.Tensor, batch_size: int = 4) -> float:
    """The former implementation: float32 logits of ``batch_size`` whole windows at once."""
    keep_freed_memory()
    nlls: list[float] = []
    with torch.no_grad():
        for start in range(0, windows.shape[0], batch_size):
            batch = windows[start : start + batch_size]
            logits = model(input_ids=batch, use_cache=False).logits[:, :-1].float()
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="none")
            nlls.extend(loss.view(batch.shape[0], -1).mean(dim=1).tolist())
    return math.exp(sum(nlls) / len(nlls))


def measure(impl: str, model_name: str, seqlen: int, count: int) -> dict:
    """Load, reset the high-water mark, evaluate with ``impl`` ("before" | "after"), report."""
    loaded = load_model(model_name)
    windows = eval_windows(load_tokens("wiki", "test", loaded.codec), seqlen, count, bos_id(loaded))
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    loaded_mb = _rss_mb("VmRSS")
    start = time.perf_counter()
    if impl == "before":
        ppl = full_logits_perplexity(loaded.model, windows)
    else:
        ppl = perplexity(loaded.model, windows, torch.device("cpu"))
    return {"ppl": ppl, "seconds": round(time.perf_counter() - start, 2), "rss_loaded_mb": round(loaded_mb, 1),
            "peak_rss_mb": round(_rss_mb("VmHWM"), 1), "eval_extra_mb": round(_rss_mb("VmHWM") - loaded_mb, 1)}


def main() -> None:
    """Run both implementations in child processes and print the comparison as JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seqlen", type=int, default=1024)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--impl", choices=("before", "after"), help=argparse.SUPPRESS)  # child mode
    args = parser.parse_args()
    if args.impl:
        print(json.dumps(measure(args.impl, args.model, args.seqlen, args.windows)))
        return
    record = {"benchmark": "eval_memory", "model": args.model, "seqlen": args.seqlen, "windows": args.windows}
    for impl in ("before", "after"):
        child = subprocess.run([sys.executable, __file__, "--impl", impl, "--model", args.model, "--seqlen",
                                str(args.seqlen), "--windows", str(args.windows)],
                               capture_output=True, text=True, check=True)
        record[impl] = json.loads(child.stdout.strip().splitlines()[-1])
    record["ppl_rel_diff"] = abs(record["after"]["ppl"] / record["before"]["ppl"] - 1)
    print(json.dumps(record))


if __name__ == "__main__":
    main()
