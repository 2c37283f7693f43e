"""Hand-made frontier benchmark records (the schema of ``benchmarks/bench_frontier.py``) for the frontier tests."""

from __future__ import annotations

from typing import Any

DENSE_PPL = 20.0
DENSE_RATE = {"1": 20.0, "8": 100.0}


def record(entry: str, family: str, ppl: float, *, decode: dict[str, float] | None = None,
           on_disk: int | None = None, estimate: int | None = None, reason: str | None = None,
           steps: tuple[str, ...] = ("numerical",)) -> dict[str, Any]:
    """One output's record; ``decode`` None: not measured (not saved)."""
    speed = None if decode is None else {
        "device": "cpu", "threads": 1, "batches": [1, 8], "decode_tokens_per_s": decode,
        "dense_decode_tokens_per_s": DENSE_RATE, "prefill_tokens_per_s": {"1": 300.0, "8": 900.0},
        "dense_prefill_tokens_per_s": {"1": 250.0, "8": 800.0}}
    chain = [] if family == "dense" else [
        {"run": f"20261127-0{i}0000-{m}-ab12", "method": m, "compression": "structured:20%", "git": "abc1234",
         "seconds": 10.0} for i, m in enumerate(steps)]
    return {"benchmark": "frontier", "entry": entry, "family": family, "recovery": None, "chain": chain,
            "ppl": ppl, "dense_ppl": DENSE_PPL, "params": None, "bytes_on_disk": on_disk, "bytes_estimated": estimate,
            "stored_as": "shrunk", "saved": on_disk is not None, "not_saved_reason": reason, "speed": speed,
            "protocol": {"calibration": {"source": "wiki", "split": "train", "nsamples": 32, "seqlen": 512,
                                         "seed": 0},
                         "evaluation": {"dataset": "wiki", "split": "test", "seqlen": 512, "windows": 210,
                                        "tokens": 107520, "all_windows": True}},
            "load_average": [3.0, 5.5], "versions": {"git": "abc1234"}}


MIB = 2**20
# dense: best ppl, 1×; width: faster, worse; depth: fastest, worst; slow: slower AND worse than width (behind);
# awq: not saved (estimated bytes, no speed)
RECORDS = [
    record("dense", "dense", DENSE_PPL, decode=DENSE_RATE, on_disk=500 * MIB, steps=()),
    record("numerical 20%", "width", 25.0, decode={"1": 26.0, "8": 130.0}, on_disk=400 * MIB),
    record("depth 8 layers", "depth", 60.0, decode={"1": 30.0, "8": 150.0}, on_disk=380 * MIB, steps=("depth",)),
    record("slow one", "width", 30.0, decode={"1": 24.0, "8": 110.0}, on_disk=450 * MIB),
    record("AWQ INT4", "quant", 21.0, estimate=160 * MIB, reason="AWQ cannot be saved", steps=("awq",)),
]
