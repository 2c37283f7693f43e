"""Greedy decode speed, dense vs a structurally pruned checkpoint, measured in alternation (prints JSON).

A single dense-then-pruned measurement on a shared machine mostly measures the neighbours: the
dense rate moved from 11.0 to 7.4 tokens/s between two runs here. This benchmark loads both models
once and alternates them for ``--rounds`` rounds (the order flips every round), so both see the
same load; the figure to read is the median of the per-round ratios pruned/dense.

Each measurement: ``generate`` with greedy decoding, batch 1, a ``--prompt``-token prompt from the
wiki test text, exactly ``--new-tokens`` new tokens, KV cache on (the Numerical Pruning paper's
setting: 64 + 128), after one warm-up; and the prefill latency (one forward over the prompt).

    python -m toolkit prune --model smollm2-135m --method numerical --sparsity structured:30% \\
        --unit heads+channels --eval none --save-model --out runs
    python -m benchmarks.bench_decode_ab --pruned runs/<run>/model [--rounds 7] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from toolkit.data.text import load_tokens
from toolkit.models.load import load_model


def params(model: torch.nn.Module) -> int:
    """Parameter count."""
    return sum(p.numel() for p in model.parameters())


def decode_rate(model: torch.nn.Module, prompt: torch.Tensor, new_tokens: int) -> tuple[float, float]:
    """(tokens/s of greedy generation of exactly ``new_tokens``, prefill milliseconds) for ``prompt`` (1, P)."""
    with torch.no_grad():
        start = time.perf_counter()
        model(input_ids=prompt, use_cache=False)
        prefill_ms = 1000 * (time.perf_counter() - start)
        start = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                             use_cache=True)
        seconds = time.perf_counter() - start
    return (out.shape[1] - prompt.shape[1]) / seconds, prefill_ms


def main() -> None:
    """Load dense and pruned, warm both up, alternate ``--rounds`` times, print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="the dense model")
    parser.add_argument("--pruned", required=True, help="a saved pruned checkpoint folder (prune --save-model)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    dense = load_model(args.model)
    models = {"dense": dense.model, "pruned": load_model(args.pruned).model}
    prompt = load_tokens("wiki", "test", dense.codec)[: args.prompt].unsqueeze(0)
    for model in models.values():
        decode_rate(model, prompt, 8)  # warm-up
    rates: dict[str, list[float]] = {"dense": [], "pruned": []}
    prefill: dict[str, list[float]] = {"dense": [], "pruned": []}
    for round_index in range(args.rounds):
        order = ("dense", "pruned") if round_index % 2 == 0 else ("pruned", "dense")
        for name in order:
            rate, ms = decode_rate(models[name], prompt, args.new_tokens)
            rates[name].append(rate)
            prefill[name].append(ms)
    ratios = [p / d for p, d in zip(rates["pruned"], rates["dense"], strict=True)]
    prefill_ratios = [d / p for p, d in zip(prefill["pruned"], prefill["dense"], strict=True)]
    print(json.dumps({
        "benchmark": "decode_ab", "model": args.model, "pruned": args.pruned, "rounds": args.rounds,
        "prompt_tokens": args.prompt, "new_tokens": args.new_tokens, "batch": 1, "threads": torch.get_num_threads(),
        "params": {name: params(model) for name, model in models.items()},
        "tokens_per_s": rates, "prefill_ms": prefill,
        "median_tokens_per_s": {name: statistics.median(values) for name, values in rates.items()},
        "decode_speedup_median": statistics.median(ratios), "decode_speedup_per_round": ratios,
        "prefill_speedup_median": statistics.median(prefill_ratios),
    }, indent=1))


if __name__ == "__main__":
    main()
