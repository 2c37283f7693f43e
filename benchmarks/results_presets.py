"""The "Presets" tables of ``docs/results.md``: the quick preset's ranking beside the CPU protocol's, and
FISTAPruner's λ search (the paper's arithmetic bisection against the bisection on log λ) on both.

Quick-preset records come from ``bench_preset_ranking.py`` (``"benchmark": "preset_ranking"``, ``"preset":
"quick"``); CPU-protocol records are ``bench_prune.py`` runs on all windows with ``propagate=pruned``
(``"benchmark": "prune"``). A run is named as both benchmarks name it (``fista@50%:bisection=geometric``);
where a file holds the same run twice, the last record counts.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.results_read import Lines, Record, Section, newest_by_run, num, records_of, table_lines

BASELINES = {"magnitude@50%": "magnitude", "wanda@50%": "Wanda", "sparsegpt@50%": "SparseGPT",
             "thanos@50%": "Thanos"}
FISTA = {"fista@50%": "FISTAPruner, paper bisection on [0, 1e6] (default)",
         "fista@50%:bisection=geometric": "FISTAPruner, bisection on log λ over [1e-8, 1e6]"}
DEFAULT_FISTA = "fista@50%"
SEARCH_LABELS = {"fista@50%": "`bisection=arithmetic` (paper, default)",
                 "fista@50%:bisection=geometric": "`bisection=geometric` (log λ)"}


def _ppl(record: Record | None) -> float | None:
    return next(iter(record["ppl"].values())) if record and record.get("ppl") else None


def _quick(records: list[Record]) -> dict[str, Record]:
    return {r["run"]: r for r in records if r.get("benchmark") == "preset_ranking" and r.get("preset") == "quick"}


def _cpu(records: list[Record]) -> dict[str, Record]:
    """The CPU protocol's run of each name; where a name was measured more than once, the newest run."""
    return newest_by_run(r for r in records if r.get("benchmark") == "prune" and r.get("propagate") == "pruned"
                         and ((r.get("protocol") or {}).get("evaluation") or {}).get("all_windows"))


def _rank(runs: dict[str, Record], fista_run: str, run: str) -> str:
    """1 + how many of the four baselines and the FISTAPruner run ``fista_run`` score lower than ``run``."""
    field = [name for name in (*BASELINES, fista_run) if name in runs]
    if run not in runs or len(field) < len(BASELINES) + 1:
        return ""
    mine = _ppl(runs[run])
    assert mine is not None
    return str(1 + sum(1 for name in field if name != run and (_ppl(runs[name]) or 0.0) < mine))


def _order(runs: dict[str, Record], fista_run: str) -> list[str]:
    names = [name for name in (*BASELINES, fista_run) if name in runs]
    return sorted(names, key=lambda name: _ppl(runs[name]) or float("inf"))


def _label(run: str) -> str:
    return BASELINES.get(run) or FISTA.get(run, run)


def _ranking_line(title: str, runs: dict[str, Record], fista_run: str) -> str:
    order = _order(runs, fista_run)
    if len(order) < len(BASELINES) + 1:
        return f"- {title}: not every method measured"
    return f"- {title}: " + " < ".join(f"{_label(name).split(',')[0]} {_ppl(runs[name]):.2f}" for name in order)


def _lam(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


def _source(record: Record | None) -> str:
    if record is None:
        return "not measured"
    commit = (record.get("versions") or {}).get("git") or "?"
    return f"`{Path(record['run_dir']).name}` at `{commit}`"


def render_presets(paths: list[Path]) -> Lines:
    """The ranking table (both protocols), the two orders and whether they agree, then the λ-search table."""
    records = records_of(paths)
    quick, cpu = _quick(records), _cpu(records)
    body = []
    for run in (*BASELINES, *FISTA):
        q, c = quick.get(run), cpu.get(run)
        fista_run = run if run in FISTA else DEFAULT_FISTA
        body.append([_label(run), num(_ppl(q), 2) if q else "not measured", _rank(quick, fista_run, run),
                     num(_ppl(c), 2) if c else "not measured", _rank(cpu, fista_run, run)])
    lines = table_lines(["method at 50 %", "quick ppl", "quick rank", "CPU protocol ppl", "CPU rank"], body)
    dense_quick = next((r["dense_ppl"] for r in quick.values() if r.get("dense_ppl")), None)
    if dense_quick:
        lines += ["", f"Dense perplexity on the quick preset's windows: {next(iter(dense_quick.values())):.2f} "
                  "(CPU protocol: the grid's dense 14.70). A rank counts the four other methods plus the FISTAPruner "
                  "row of the default search; the log-λ row is ranked as if it took the default's place."]
    lines += ["", "Best first, with the default FISTAPruner:", "",
              _ranking_line("quick preset", quick, DEFAULT_FISTA),
              _ranking_line("CPU protocol", cpu, DEFAULT_FISTA)]
    quick_order, cpu_order = _order(quick, DEFAULT_FISTA), _order(cpu, DEFAULT_FISTA)
    if len(quick_order) == len(cpu_order) == len(BASELINES) + 1:
        lines += ["", f"Same order on both: {'yes' if quick_order == cpu_order else 'no'}."]
    lines += ["", "FISTAPruner's λ search, both variants, both protocols (same rounds budget: `max_rounds=5`, "
              "T = 3, ε = 1e-3, λ₀ = 1e-5):", ""]
    rows, better = [], []
    for run, label in SEARCH_LABELS.items():
        q, c = quick.get(run), cpu.get(run)
        rows.append([label, num(_ppl(q), 2) if q else "not measured", num(q["prune_seconds"], 0) if q else "",
                     num(_ppl(c), 2) if c else "not measured", num(c["prune_seconds"], 0) if c else "", _source(c)])
    for name, runs in (("quick preset", quick), ("CPU protocol", cpu)):
        paper, log = _ppl(runs.get(DEFAULT_FISTA)), _ppl(runs.get("fista@50%:bisection=geometric"))
        if paper is not None and log is not None:
            better.append(f"{name}: log λ {'lower' if log < paper else 'not lower'} ({log:.2f} vs {paper:.2f})")
    lines += table_lines(["λ search", "quick ppl", "quick prune s", "CPU ppl", "CPU prune s", "CPU run"], rows)
    if better:
        lines += ["", "Log-λ bisection against the paper's: " + "; ".join(better) + "."]
    traces = [r for r in records if r.get("benchmark") == "fista_lambda" and r.get("finished")]
    if traces:
        lines += ["", "What the λ search did in those runs (`bench_fista_lambda.py`, from each run's `LambdaStep` and "
                  "`SublayerPruned` events): linears where the rounded FISTA solution replaced the SparseGPT warm "
                  "start, outer rounds in all, rounds where FISTA zeroed every weight before rounding (λ too large), "
                  "rounds that improved, the median λ of those, and the mean relative error ‖ΔW X‖/‖W X‖ per linear "
                  "of the warm start and of the result:", ""]
        lines += table_lines(
            ["λ search", "calibration", "FISTA kept / linears", "rounds", "all-zero rounds", "improving rounds",
             "median improving λ", "warm-start error", "final error", "run"],
            [[f"`bisection={r['bisection']}`", f"{r['nsamples']} × {r['seqlen']}",
              f"{r['fista_chosen']} / {r['linears']}", num(r["rounds"]), num(r["rounds_all_zero"]),
              num(r["rounds_improved"]), _lam(r["median_improving_lam"]),
              num(r["mean_warm_start_error"], 4), num(r["mean_final_error"], 4), f"`{r['run_id']}`"]
             for r in traces])
    return lines


PRESET_SECTIONS = [
    Section(
        "Presets: the quick preset's ranking beside the CPU protocol's, and FISTAPruner's λ search",
        ("quick_ranking.jsonl", "cpu_fista_lambda.jsonl", "fista_lambda_trace.jsonl", "cpu_full_baselines.jsonl",
         "cpu_full_fista_thanos.jsonl"),
        render_presets,
        "`smollm2-135m` at 50 % unstructured, every method's default options unless the row says otherwise. Quick "
        "preset (`--protocol quick`, the app's default): calibration 16 × 128 tokens of `wiki` train (2,048 tokens, "
        "more than the 1,536 inputs of `down_proj`), seed 0; perplexity on the first 16 windows of 128 tokens of "
        "`wiki` test. CPU protocol: 32 × 512 calibration tokens, all 210 windows of 512. Measured on the shared "
        "2-core development machine while other jobs ran on it (load average 20-35; one intra-op thread per new run "
        "but the quick magnitude run, which had two): seconds are loose upper bounds.",
        "python -m benchmarks.bench_preset_ranking --threads 1 --protocol quick \\\n"
        "      --json benchmarks/results/quick_ranking.jsonl\n"
        "OMP_NUM_THREADS=1 python -m benchmarks.bench_prune --runs fista@50%:bisection=geometric \\\n"
        "      --json benchmarks/results/cpu_fista_lambda.jsonl\n"
        "python -m benchmarks.bench_fista_lambda RUN_FOLDER ... --json benchmarks/results/fista_lambda_trace.jsonl",
    ),
]
