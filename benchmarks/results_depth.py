"""The "Depth pruning" table of ``docs/results.md``: whole decoder layers removed from the embedded model,
read from ``bench_prune.py``'s records of ``--method depth`` runs (``cpu_depth.jsonl``)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.results_read import Lines, Section, first_value, num, records_of, table_lines


def render_depth(paths: list[Path]) -> Lines:
    """One row per run: layers removed, score, perplexity against dense, decoder weights kept, bytes, seconds."""
    records = [r for r in records_of(paths) if r.get("method") == "depth"]
    if not records:
        return ["No depth-pruning measurement yet."]
    rows = []
    for r in records:
        accounting = r.get("accounting") or {}
        before, after = accounting.get("params_before"), accounting.get("params_after")
        kept = f"{after:,} of {before:,}" if before and after else ""
        rows.append([f"`{r['run']}`", r.get("sparsity", ""), (r.get("options") or {}).get("score", "bi"),
                     num(first_value(r.get("ppl"))), num(first_value(r.get("dense_ppl"))), kept,
                     num(accounting.get("estimated_bytes")), num(r.get("prune_seconds"), 1),
                     num(r.get("peak_rss_mb"), 0)])
    return table_lines(["run", "removed", "score", "wiki ppl", "dense ppl", "decoder-linear weights kept",
                        "estimated bytes (float32)", "prune s", "peak RSS MiB"], rows)


DEPTH_SECTIONS = (
    Section(
        "Depth pruning on SmolLM2-135M (all 210 windows)",
        ("cpu_depth.jsonl",),
        render_depth,
        "`smollm2-135m` (30 decoder layers), calibration wiki train 32 × 512 tokens, seed 0; evaluation wiki test, "
        "seqlen 512, all windows. `--method depth` removes whole decoder layers: `score=bi` the layers of lowest "
        "block influence 1 − cos(x_in, x_out), `score=angular` the consecutive block of smallest angular distance "
        "(docs/methods/depth.md). No recovery fine-tuning. The 2-core host ran other jobs at the same time "
        "(load average about 17), so the seconds are not comparable with the other tables.",
        """python -m benchmarks.bench_prune --runs "depth@structured:4 layers" "depth@structured:8 layers" \\
  "depth@structured:8 layers:score=angular" "depth@structured:4 layers:score=angular" \\
  --json benchmarks/results/cpu_depth.jsonl""",
    ),
)
