"""The "RIA and channel permutation" table of ``docs/results.md``: RIA and ``--permute`` runs of the CPU
protocol (``cpu_ria.jsonl``, ``cpu_permute.jsonl``) beside the unpermuted n:m runs of the grid
(``cpu_full_baselines.jsonl``, ``cpu_full_48.jsonl``, ``cpu_full_fista_thanos.jsonl``): one row per method and
pattern, without and with ``--permute``."""

from __future__ import annotations

from pathlib import Path

from benchmarks.results_read import Lines, Section, first_value, newest_by_run, num, records_of, table_lines

PERMUTED = ("wanda", "sparsegpt", "thanos", "ria")  # the methods measured with --permute
NM_PATTERNS = ("2:4", "4:8")


def _commit(record: dict) -> str:
    return (record.get("versions") or {}).get("git") or "?"


def _measured(paths: list[Path]) -> dict[str, dict]:
    """The newest all-window prune record of every RIA run and every n:m run of a method measured with --permute."""
    return newest_by_run(r for r in records_of(paths) if r.get("benchmark") == "prune"
                         and ((r.get("protocol") or {}).get("evaluation") or {}).get("all_windows")
                         and (r.get("method") == "ria" or (r.get("method") in PERMUTED
                                                           and r.get("sparsity") in NM_PATTERNS)))


def _where(record: dict | None) -> str:
    return "" if record is None else f"`{Path(str(record.get('run_dir', ''))).name}` at `{_commit(record)}`"


def render_permute(paths: list[Path]) -> Lines:
    """One row per method and n:m pattern: perplexity without and with ``--permute`` and the change; RIA's
    unstructured runs below them. Newest run of a name."""
    runs = _measured(paths)
    if not runs:
        return ["No RIA or permutation measurement yet."]
    pairs: dict[tuple[str, str], dict[bool, dict]] = {}
    for record in runs.values():
        if record.get("sparsity") in NM_PATTERNS:
            options = ", ".join(f"{k}={v}" for k, v in sorted((record.get("options") or {}).items()) if k != "permute")
            method = f"{record['method']} ({options})" if options else str(record["method"])
            pairs.setdefault((method, str(record["sparsity"])), {})[bool(record.get("permute"))] = record
    rows = []
    for (method, pattern), pair in sorted(pairs.items(), key=lambda item: (item[0][1], item[0][0])):
        plain, permuted = pair.get(False), pair.get(True)
        p0 = first_value(plain.get("ppl")) if plain else None
        p1 = first_value(permuted.get("ppl")) if permuted else None
        change = f"{100 * (p1 - p0) / p0:+.1f} %" if p0 and p1 else "not measured"
        rows.append([method, pattern, num(p0) if p0 else "not measured", num(p1) if p1 else "not measured", change,
                     " · ".join(w for w in (_where(plain), _where(permuted)) if w)])
    for _, record in sorted(runs.items()):
        if record.get("sparsity") not in NM_PATTERNS:
            rows.append([str(record["method"]), str(record.get("sparsity", "")), num(first_value(record.get("ppl"))),
                         "–", "–", _where(record)])
    return table_lines(["method", "sparsity", "wiki ppl", "with --permute", "change", "runs"], rows)


PERMUTE_SECTIONS = (
    Section(
        "RIA and channel permutation for n:m (all 210 windows)",
        ("cpu_ria.jsonl", "cpu_permute.jsonl", "cpu_full_baselines.jsonl", "cpu_full_48.jsonl",
         "cpu_full_fista_thanos.jsonl"),
        render_permute,
        "`smollm2-135m`, CPU protocol: calibration wiki train 32 × 512 tokens, seed 0; evaluation wiki test, "
        "seqlen 512, all windows. `--permute` (docs/methods/ria.md) permutes each linear's inputs so the important "
        "ones spread over the m-groups, solves in that order and maps the weight back (the checkpoint keeps the "
        "original order; its masks are n:m in the recorded permuted order). Where a run name was measured more "
        "than once, the newest run. The 2-core host ran other jobs at the same time: no seconds are given.",
        """python -m benchmarks.bench_prune --runs ria@50% ria@2:4 --json benchmarks/results/cpu_ria.jsonl
python -m benchmarks.bench_prune --runs wanda@2:4 wanda@2:4:permute=1 sparsegpt@2:4:permute=1 \\
  wanda@4:8:permute=1 sparsegpt@4:8:permute=1 ria@4:8 ria@2:4:permute=1 "thanos@2:4:alpha=0.1,permute=1" \\
  --json benchmarks/results/cpu_permute.jsonl""",
    ),
)
