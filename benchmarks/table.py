"""Turn benchmark JSON lines (bench_prune.py output) into the README's markdown table.

    python benchmarks/table.py benchmarks/results/*.jsonl
"""

from __future__ import annotations

import json
import sys


def rows(paths: list[str]) -> list[dict]:
    """Every record of every file, in order (later duplicates of a run replace earlier ones)."""
    records: dict[tuple, dict] = {}
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    key = (record["method"], record["sparsity"], json.dumps(record["options"], sort_keys=True),
                           record.get("propagate"))
                    records[key] = record
    return list(records.values())


def main() -> None:
    """Print the table."""
    records = [r for r in rows(sys.argv[1:]) if r["ppl"]]  # speed-only (--no-eval) rows have no perplexity
    print("| method | sparsity | options | propagate | ppl (wiki) | dense ppl | achieved | prune s | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in records:
        options = ", ".join(f"{k}={v}" for k, v in r["options"].items()) or "—"
        ppl = next(iter(r["ppl"].values()), float("nan"))
        dense = next(iter(r["dense_ppl"].values()), float("nan"))
        print(f"| {r['method']} | {r['sparsity']} | {options} | {r.get('propagate', '')} | {ppl:.2f} | {dense:.2f} | "
              f"{r['achieved_sparsity']:.4f} | {r['prune_seconds']:.0f} | {r['peak_rss_mb']:.0f} |")
    if records:
        ev = records[0]["protocol"]["evaluation"]
        cal = records[0]["protocol"]["calibration"]
        print(f"\nProtocol: calibration {cal['source']} {cal['split']} {cal['nsamples']} × {cal['seqlen']}, seed "
              f"{cal['seed']}; evaluation {ev['dataset']} {ev['split']}, seqlen {ev['seqlen']}, {ev['windows']} windows "
              f"({ev['tokens']} tokens){'' if ev.get('all_windows') else ', the first windows only'}.")


if __name__ == "__main__":
    main()
