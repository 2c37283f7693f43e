"""The "Allocation and refinement" table of ``docs/results.md``: OWL and DSnoT on the embedded model.

Records of ``bench_allocation.py`` (``"benchmark": "allocation"``): one row per method and sparsity,
one perplexity column per variant (uniform, OWL, uniform + DSnoT, OWL + DSnoT), then the seconds of
each step; records of ``toolkit recover`` runs (``"benchmark": "recover"``) add the recovered
perplexity of the run they name.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.results_read import Lines, Record, Section, num, records_of, table_lines

VARIANTS = (("uniform", None), ("owl", None), ("uniform", "dsnot"), ("owl", "dsnot"))
HEADERS = ("uniform", "OWL", "uniform + DSnoT", "OWL + DSnoT")


METHODS = ("magnitude", "wanda", "sparsegpt", "fista", "thanos", "awp")  # row order: cheapest method first


def _row_order(key: tuple[str, str]) -> tuple[int, str, float]:
    """Rows by method (:data:`METHODS` order, others after), then by sparsity ascending."""
    method, sparsity = key
    rank = METHODS.index(method) if method in METHODS else len(METHODS)
    try:
        value = float(sparsity.rstrip("%"))
    except ValueError:
        value = float("inf")
    return rank, method, value


def _variant(record: Record) -> tuple[str, str | None]:
    allocation = "owl" if str(record["allocation"]).startswith("owl") else "uniform"
    return allocation, "dsnot" if record.get("refine") else None


def _ppl(record: Record | None) -> float | None:
    return next(iter(record["ppl"].values())) if record and record.get("ppl") else None


def _uniform_baselines(records: list[Record], grid: dict) -> list[str]:
    """Fill the uniform cells the grid lacks from ``bench_prune`` records of the same run on all windows.

    Returns the commits they were measured at (named under the table).
    """
    commits = []
    for r in records:
        method, _, sparsity = str(r.get("run", "")).partition("@")
        evaluation = (r.get("protocol") or {}).get("evaluation") or {}
        if r.get("benchmark") != "prune" or (method, sparsity) not in grid or not evaluation.get("all_windows"):
            continue
        if (r.get("options") or {}) or ("uniform", None) in grid[(method, sparsity)]:
            continue
        grid[(method, sparsity)][("uniform", None)] = {**r, "prune_seconds": r["prune_seconds"], "plan_seconds": 0.0,
                                                      "refine_seconds": 0.0}
        commits.append(f"{r['run']} at `{(r.get('versions') or {}).get('git', '?')}`")
    return commits


def render_allocation(paths: list[Path]) -> Lines:
    """Perplexity per method × sparsity × variant, the seconds of each step, and recovery rows."""
    records = records_of(paths)
    runs = [r for r in records if r.get("benchmark") == "allocation"]
    grid: dict[tuple[str, str], dict[tuple[str, str | None], Record]] = {}
    for r in runs:
        grid.setdefault((r["method"], r["sparsity"]), {})[_variant(r)] = r
    baselines = _uniform_baselines(records, grid)
    body, times = [], []
    for (method, sparsity), cells in sorted(grid.items(), key=lambda item: _row_order(item[0])):
        body.append([method, sparsity, *[num(_ppl(cells.get(v)), 2) if v in cells else "not measured"
                                         for v in VARIANTS]])
        for variant, header in zip(VARIANTS, HEADERS, strict=True):
            r = cells.get(variant)
            if r is not None:
                times.append([method, sparsity, header, num(r["prune_seconds"], 0), num(r["plan_seconds"], 1),
                              num(r["refine_seconds"], 1), num(r.get("total_seconds"), 0),
                              num(r.get("dsnot_swaps")), num(r.get("rel_error_before_refine"), 4),
                              num(r.get("rel_error_after_refine"), 4)])
    lines = table_lines(["method", "sparsity", *HEADERS], body)
    if baselines:
        lines += ["", "Uniform cells without a run of their own are the perplexity grid's runs of the same protocol "
                  f"(`bench_prune.py`, same engine numerics): {', '.join(baselines)}."]
    lines += ["", "Seconds of each step (pruning includes the plan phase and the refinement), and DSnoT's effect on "
              "the mean per-linear error ‖ΔW X*‖/‖W X*‖ of the refined linears:", ""]
    lines += table_lines(["method", "sparsity", "variant", "prune s", "plan s", "refine s", "run s (with eval)",
                          "DSnoT swaps", "error before DSnoT", "error after"], times)
    recovered = [r for r in records if r.get("benchmark") == "recover"]
    if recovered:
        lines += ["", "Recovery (`python -m toolkit recover RUN`, `bench_recover.py`): masked LoRA on the parent's "
                  "calibration text with the recovery defaults of [recover.md](recover.md), perplexity on the same "
                  "210 windows before and after:", ""]
        lines += table_lines(["parent run", "steps", "ppl before", "ppl after", "training s", "run s (with evals)"],
                             [[r["parent"], num(r["steps"]), num(r["ppl_before"], 2), num(r["ppl_after"], 2),
                               num(r["seconds"], 0), num(r.get("total_seconds"), 0)] for r in recovered])
    return lines


ALLOCATION_SECTIONS = [
    Section(
        "Allocation (OWL) and mask refinement (DSnoT) at 60 % and 70 %",
        ("allocation_*.jsonl", "cpu_full_fista_more.jsonl", "cpu_awp_full.jsonl"),
        render_allocation,
        "`smollm2-135m`, CPU protocol: calibration 32 × 512 tokens of `wiki` train, seed 0; evaluation `wiki` "
        "test, seqlen 512, all 210 windows. OWL with its defaults (M = 5, λ = 0.08), DSnoT with its defaults "
        "(50 cycles, ε = 0.1 / 2048 per token, the attention's linears). Measured on the shared 2-core development "
        "machine while other jobs ran on it: seconds are loose upper bounds. A cell says \"not measured\" where "
        "the run did not fit in the session's time.",
        "python -m benchmarks.bench_allocation --methods wanda sparsegpt fista --sparsities 70% 60% \\\n"
        "      --json benchmarks/results/allocation_cpu.jsonl",
    ),
]
