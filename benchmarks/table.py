"""Turn benchmark JSON lines (bench_prune.py output) into the README's markdown tables.

    python -m benchmarks.table benchmarks/results/*.jsonl          # one row per run
    python -m benchmarks.table --grid benchmarks/results/*.jsonl   # ppl and time grids: variant × sparsity
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable


def rows(paths: list[str]) -> list[dict]:
    """Every record of every file, in order (later duplicates of a run replace earlier ones)."""
    records: dict[tuple, dict] = {}
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    key = (record["method"], record["sparsity"], json.dumps(record["options"], sort_keys=True),
                           record.get("propagate"), seed(record))
                    records[key] = record
    return list(records.values())


def _options(record: dict) -> str:
    """The options the run set, ``key=value, …`` ("" for the method's defaults)."""
    return ", ".join(f"{k}={v}" for k, v in record["options"].items())


def _first(values: dict) -> float:
    """The one dataset's value of a ppl dict (nan when empty)."""
    return next(iter(values.values()), float("nan"))


def seed(record: dict) -> int:
    """The run's calibration seed (0, the protocol's, for records that do not say)."""
    return int(((record.get("protocol") or {}).get("calibration") or {}).get("seed", 0))


def variant(record: dict) -> str:
    """``method`` plus the options the run set, a non-default propagation and seed: a grid row's name."""
    options = _options(record)
    propagate = "" if record.get("propagate", "pruned") == "pruned" else f"propagate={record['propagate']}"
    seeded = f"seed={seed(record)}" if seed(record) else ""
    extra = ", ".join(part for part in (options, propagate, seeded) if part)
    return f"{record['method']} ({extra})" if extra else record["method"]


def grid(records: list[dict], cell: Callable[[dict], str]) -> list[str]:
    """Markdown rows: one per variant (first-seen order), one column per sparsity (first-seen order)."""
    columns = list(dict.fromkeys(r["sparsity"] for r in records))
    names = list(dict.fromkeys(variant(r) for r in records))
    found = {(variant(r), r["sparsity"]): r for r in records}
    lines = ["| method | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for name in names:
        cells = [cell(found[name, c]) if (name, c) in found else "" for c in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _ppl(record: dict) -> str:
    return f"{_first(record['ppl']):.2f}"


def _time(record: dict) -> str:
    return f"{record['prune_seconds']:.0f} s / {record['peak_rss_mb']:.0f}"


def main() -> None:
    """Print the table (or, with ``--grid``, the perplexity and time grids)."""
    args = sys.argv[1:]
    as_grid = "--grid" in args
    records = [r for r in rows([a for a in args if a != "--grid"]) if r["ppl"]]  # --no-eval rows have no ppl
    if as_grid:
        print("\n".join(grid(records, _ppl)) + "\n\n" + "\n".join(grid(records, _time)))
        return
    print("| method | sparsity | options | propagate | ppl (wiki) | dense ppl | achieved | prune s | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in records:
        print(f"| {r['method']} | {r['sparsity']} | {_options(r) or '—'} | {r.get('propagate', '')} | "
              f"{_first(r['ppl']):.2f} | {_first(r['dense_ppl']):.2f} | "
              f"{r['achieved_sparsity']:.4f} | {r['prune_seconds']:.0f} | {r['peak_rss_mb']:.0f} |")
    if records:
        ev = records[0]["protocol"]["evaluation"]
        cal = records[0]["protocol"]["calibration"]
        print(f"\nProtocol: calibration {cal['source']} {cal['split']} {cal['nsamples']} × {cal['seqlen']}, seed "
              f"{cal['seed']}; evaluation {ev['dataset']} {ev['split']}, seqlen {ev['seqlen']}, "
              f"{ev['windows']} windows "
              f"({ev['tokens']} tokens){'' if ev.get('all_windows') else ', the first windows only'}.")


if __name__ == "__main__":
    main()
