"""Size, speed and perplexity of a structurally pruned model, dense vs pruned vs reloaded (prints JSON).

The model is pruned by the block engine directly (``toolkit.engine.block.driver.prune_blocks``), saved
with ``toolkit.models.shrunk.save_shrunk`` and loaded back with ``toolkit.models.load.load_model``. Measured:

- parameters and checkpoint bytes (``*.safetensors``) before / after;
- greedy generation tokens/s (batch 1, a 64-token prompt from the wiki test text, 128 new tokens,
  KV cache on) and prefill latency (median of 5 forward passes over the prompt);
- perplexity on ``eval_windows(load_tokens("wiki", "test"), 512, 40)`` for dense, pruned, reloaded.

Calibration: wiki train, ``--nsamples`` × ``--seqlen`` windows, seed 0 (32 × 512 is the CPU protocol).

    OMP_NUM_THREADS=2 python -m benchmarks.bench_structured_speed --method numerical --ratio 30%
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from toolkit.data.text import CalibSpec, calibration_windows, eval_windows, load_tokens
from toolkit.engine.block.driver import prune_blocks
from toolkit.engine.state import EngineConfig
from toolkit.engine.writeback import WriteBack
from toolkit.evaluation.perplexity import perplexity
from toolkit.methods import get_method
from toolkit.models.load import load_model
from toolkit.models.save import save_checkpoint
from toolkit.models.shrunk import save_shrunk
from toolkit.run.pipeline import bos_id
from toolkit.runtime.devices import resolve_device
from toolkit.spec.compression import parse_compression


def checkpoint_bytes(folder: Path) -> int:
    """Bytes of the weight files of a saved checkpoint."""
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


def speed(model: torch.nn.Module, prompt: torch.Tensor, new_tokens: int, device: torch.device) -> dict:
    """Greedy tokens/s for ``new_tokens`` after ``prompt`` (1, P) and the median prefill latency."""
    model.to(device)
    prompt = prompt.to(device)
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=4, do_sample=False, use_cache=True)  # warm-up
        prefill = []
        for _ in range(5):
            start = time.perf_counter()
            model(input_ids=prompt, use_cache=False)
            _sync(device)
            prefill.append(time.perf_counter() - start)
        start = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                             use_cache=True)
        _sync(device)
        seconds = time.perf_counter() - start
    model.to("cpu")
    generated = out.shape[1] - prompt.shape[1]
    return {"generate_tokens_per_s": generated / seconds, "generated_tokens": generated,
            "prefill_ms": 1000 * statistics.median(prefill)}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(model: torch.nn.Module, folder: Path, inputs: dict, device: torch.device) -> dict:
    """Parameters, checkpoint bytes, speed and perplexity of ``model`` saved in ``folder``."""
    record = {"params": sum(p.numel() for p in model.parameters()), "checkpoint_bytes": checkpoint_bytes(folder)}
    record.update(speed(model, inputs["prompt"], inputs["new_tokens"], device))
    record["ppl"] = perplexity(model, inputs["test"], device)
    return record


def main() -> None:
    """Prune once, measure dense / pruned / reloaded, print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--method", default="numerical")
    parser.add_argument("--ratio", default="30%")
    parser.add_argument("--unit", default="heads+channels")
    parser.add_argument("--set", nargs="*", default=[], help="method options key=value")
    parser.add_argument("--nsamples", type=int, default=32)
    parser.add_argument("--seqlen", type=int, default=512)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    device = resolve_device(args.device)
    loaded = load_model(args.model)
    codec, bos = loaded.codec, bos_id(loaded)
    calib = calibration_windows(load_tokens("wiki", "train", codec), CalibSpec("wiki", args.nsamples, args.seqlen, 0),
                                bos)
    test_tokens = load_tokens("wiki", "test", codec)
    inputs = {"test": eval_windows(test_tokens, 512, 40, None), "prompt": test_tokens[:64].unsqueeze(0),
              "new_tokens": args.new_tokens}
    spec = get_method(args.method)
    options = dict(item.split("=", 1) for item in args.set)
    with tempfile.TemporaryDirectory() as tmp:
        dense = measure(loaded.model, save_checkpoint(loaded.model, codec, Path(tmp) / "dense"), inputs, device)
        start = time.perf_counter()
        result = prune_blocks(loaded.model, calib, spec, parse_compression(f"structured:{args.ratio}", None, args.unit),
                              spec.make_config(options), cfg=EngineConfig(device=str(device)), emit=lambda e: None,
                              writeback=WriteBack(enabled=False))
        prune_seconds = time.perf_counter() - start
        folder = save_shrunk(loaded.model, codec, Path(tmp) / "pruned")
        pruned = measure(loaded.model, folder, inputs, device)
        reloaded = load_model(str(folder)).model
        reloaded_ppl = perplexity(reloaded, inputs["test"], device)
    layers = result.structure["layers"]
    print(json.dumps({
        "benchmark": "structured_speed", "model": args.model, "method": args.method, "options": options,
        "sparsity": f"structured:{args.ratio}", "unit": args.unit, "device": str(device),
        "calibration": {"source": "wiki", "nsamples": args.nsamples, "seqlen": args.seqlen, "seed": 0},
        "eval": {"dataset": "wiki", "split": "test", "seqlen": 512, "windows": int(inputs["test"].shape[0])},
        "prune_seconds": prune_seconds, "projection_params_removed": result.achieved_sparsity,
        "heads_per_layer": [r["num_heads"] for r in layers],
        "kv_heads_per_layer": [r["num_kv_heads"] for r in layers],
        "intermediate_per_layer": [r["intermediate_size"] for r in layers],
        "dense": dense, "pruned": pruned, "reloaded_ppl": reloaded_ppl,
        "threads": torch.get_num_threads(),
    }, indent=1))


if __name__ == "__main__":
    main()
