"""The "RIA and channel permutation" table of ``docs/results.md``: RIA and ``--permute`` runs of the CPU
protocol (``cpu_ria.jsonl``, ``cpu_permute.jsonl``) beside the unpermuted n:m runs of the grid
(``cpu_full_baselines.jsonl``)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.results_read import Lines, Section, first_value, newest_by_run, num, records_of, table_lines

PERMUTED = ("wanda", "sparsegpt")  # the methods measured with --permute


def _commit(record: dict) -> str:
    return (record.get("versions") or {}).get("git") or "?"


def render_permute(paths: list[Path]) -> Lines:
    """One row per run: the permuted runs, RIA, and the same methods' unpermuted 2:4 runs; newest run of a name."""
    runs = newest_by_run(r for r in records_of(paths) if r.get("benchmark") == "prune"
                         and ((r.get("protocol") or {}).get("evaluation") or {}).get("all_windows")
                         and (r.get("method") == "ria" or (r.get("method") in PERMUTED and r.get("sparsity") == "2:4")))
    if not runs:
        return ["No RIA or permutation measurement yet."]
    rows = [[f"`{name}`", r.get("sparsity", ""), "yes" if r.get("permute") else "no", num(first_value(r.get("ppl"))),
             num(first_value(r.get("dense_ppl"))), f"`{Path(str(r.get('run_dir', ''))).name}` at `{_commit(r)}`"]
            for name, r in sorted(runs.items(), key=lambda item: (item[1].get("sparsity", ""), item[0]))]
    return table_lines(["run", "sparsity", "--permute", "wiki ppl", "dense ppl", "run"], rows)


PERMUTE_SECTIONS = (
    Section(
        "RIA and channel permutation for n:m (all 210 windows)",
        ("cpu_ria.jsonl", "cpu_permute.jsonl", "cpu_full_baselines.jsonl"),
        render_permute,
        "`smollm2-135m`, CPU protocol: calibration wiki train 32 × 512 tokens, seed 0; evaluation wiki test, "
        "seqlen 512, all windows. `--permute` (docs/methods/ria.md) permutes each linear's inputs so the important "
        "ones spread over the m-groups, solves in that order and maps the weight back (the checkpoint keeps the "
        "original order; its masks are n:m in the recorded permuted order). Where a run name was measured more "
        "than once, the newest run. The 2-core host ran other jobs at the same time: no seconds are given.",
        """python -m benchmarks.bench_prune --runs ria@50% ria@2:4 --json benchmarks/results/cpu_ria.jsonl
python -m benchmarks.bench_prune --runs wanda@2:4 wanda@2:4:permute=1 sparsegpt@2:4:permute=1 \\
  --json benchmarks/results/cpu_permute.jsonl""",
    ),
)
