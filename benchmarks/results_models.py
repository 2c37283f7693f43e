"""Two models side by side in ``docs/results.md``: every headline cell of the CPU protocol on SmolLM2-135M and
Gemma-3-270M, with the spread over calibration seeds where more than one seed was run, and the findings on
which the two models agree or disagree, computed from the same records.

A cell is a method, its target (sparsity, quantization, ``--permute``) and its options, on one model, under the
CPU protocol: calibration wiki train 32 × 512, every evaluation window of wiki test at seqlen 512. Per seed the
newest run counts; a cell with several seeds shows mean ± sample standard deviation and n. A comparison whose
difference is smaller than the larger of the two cells' spreads is printed "within noise"; one whose cells have
a single seed says that its noise is not measured. A cell no record fills says "not measured".
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from benchmarks.results_read import Lines, Record, Section, first_value, records_of, run_stamp, table_lines

MODELS = {"smollm2-135m": "SmolLM2-135M", "gemma-3-270m": "Gemma-3-270M"}
CALIBRATION = {"source": "wiki", "split": "train", "nsamples": 32, "seqlen": 512}
EVALUATION = {"dataset": "wiki", "split": "test", "seqlen": 512, "all_windows": True}
MISSING = "not measured"
AWP_GPTQ = "awp@int4 (grid_update=nearest, quant_init=gptq)"

# The tables: (title, cell names in order). A cell's name is ``method@target`` plus its options, as cell_name().
TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("One-shot pruning at 50 %", tuple(f"{m}@50%" for m in (
        "magnitude", "wanda", "ria", "sparsegpt", "thanos", "fista", "alps", "awp"))),
    ("Higher sparsity and 4:8", tuple(f"{m}@{t}" for t in ("60%", "70%") for m in ("wanda", "sparsegpt", "thanos",
                                                                                    "fista"))
     + tuple(f"{m}@4:8" for m in ("wanda", "sparsegpt", "thanos"))),
    ("n:m, without and with `--permute`", tuple(f"{m}@2:4{p}" for m in ("wanda", "sparsegpt", "thanos", "alps")
                                              for p in ("", " +permute"))),
    ("Quantizers (`int4`, `int3`: the group fitted to the model: g64 on SmolLM2, g128 on Gemma)",
     ("rtn@int4", "gptq@int4", "awq@int4", "awp@int4", AWP_GPTQ, "awp@int4 (grid_update=nearest)",
      "rtn@int3", "gptq@int3", "awq@int3", "awp@int3")),
    ("Structured: whole layers, heads and channels", (
        "depth@structured:2 layers", "depth@structured:4 layers", "numerical@structured:20%",
        "numerical@structured:30%", "flap@structured:30%")),
)
# Findings checked on both models: (what, cell a, cell b); "a below b" means a has the lower perplexity.
FINDINGS: tuple[tuple[str, str, str], ...] = (
    ("GPTQ against RTN at INT4", "gptq@int4", "rtn@int4"),
    ("AWQ against GPTQ at INT4", "awq@int4", "gptq@int4"),
    ("AWP (default) against RTN at INT4", "awp@int4", "rtn@int4"),
    ("AWP from GPTQ's solution with nearest grids against AWP's default at INT4", AWP_GPTQ, "awp@int4"),
    ("SparseGPT against Wanda at 50 %", "sparsegpt@50%", "wanda@50%"),
    ("Thanos against SparseGPT at 50 %", "thanos@50%", "sparsegpt@50%"),
    ("FISTAPruner against Thanos at 50 %", "fista@50%", "thanos@50%"),
    ("ALPS against FISTAPruner at 50 %", "alps@50%", "fista@50%"),
    ("Thanos against SparseGPT at 2:4", "thanos@2:4", "sparsegpt@2:4"),
    ("SparseGPT against Wanda at 60 %", "sparsegpt@60%", "wanda@60%"),
    ("Thanos against SparseGPT at 60 %", "thanos@60%", "sparsegpt@60%"),
    ("Thanos against SparseGPT at 70 %", "thanos@70%", "sparsegpt@70%"),
    ("`--permute` on Wanda 2:4", "wanda@2:4 +permute", "wanda@2:4"),
    ("`--permute` on SparseGPT 2:4", "sparsegpt@2:4 +permute", "sparsegpt@2:4"),
    ("GPTQ against RTN at INT3", "gptq@int3", "rtn@int3"),
    ("AWQ against GPTQ at INT3", "awq@int3", "gptq@int3"),
)


def in_protocol(record: Record) -> bool:
    """A prune record of one of :data:`MODELS` on the CPU protocol (any calibration seed)."""
    proto = record.get("protocol") or {}
    cal, ev = proto.get("calibration") or {}, proto.get("evaluation") or {}
    return (record.get("benchmark") == "prune" and record.get("model", "smollm2-135m") in MODELS
            and first_value(record.get("ppl")) is not None
            and all(cal.get(k) == v for k, v in CALIBRATION.items())
            and all(ev.get(k) == v for k, v in EVALUATION.items()))


def cell_name(record: Record) -> str:
    """``method@target`` (`` +permute`` for a permuted n:m run) and its options: ``awp@int4 (quant_init=gptq)``."""
    method, target = str(record["method"]), str(record["sparsity"])  # as run: 50%, 2:4, int4, 50%+int4
    options = ", ".join(f"{k}={v}" for k, v in sorted((record.get("options") or {}).items()) if k != "permute")
    permute = " +permute" if record.get("permute") else ""
    return f"{method}@{target}{permute}" + (f" ({options})" if options else "")


@dataclass(frozen=True)
class Cell:
    """One method and target on one model: the perplexity per calibration seed (the newest run of each)."""

    by_seed: dict[int, float]
    dense: float | None

    @property
    def mean(self) -> float:
        """Mean over the seeds."""
        return statistics.fmean(self.by_seed.values())

    @property
    def spread(self) -> float | None:
        """Sample standard deviation over the seeds; None with one seed (not measured)."""
        return statistics.stdev(self.by_seed.values()) if len(self.by_seed) > 1 else None

    def text(self) -> str:
        """``27.74`` for one seed, ``27.70 ± 0.12 (n = 3)`` for several."""
        if self.spread is None:
            return f"{self.mean:.2f}"
        return f"{self.mean:.2f} ± {self.spread:.2f} (n = {len(self.by_seed)})"


def collect(records: Iterable[Record]) -> dict[str, dict[str, Cell]]:
    """model → cell name → :class:`Cell` (per seed, the newest run)."""
    newest: dict[tuple[str, str, int], Record] = {}
    for record in records:
        if not in_protocol(record):
            continue
        seed = int(record["protocol"]["calibration"].get("seed", 0))
        key = (record.get("model", "smollm2-135m"), cell_name(record), seed)
        if key not in newest or run_stamp(record) >= run_stamp(newest[key]):
            newest[key] = record
    grouped: dict[tuple[str, str], dict[int, Record]] = {}
    for (model, name, seed), record in newest.items():
        grouped.setdefault((model, name), {})[seed] = record
    cells: dict[str, dict[str, Cell]] = {model: {} for model in MODELS}
    for (model, name), by_seed in grouped.items():
        dense = next((d for r in by_seed.values() if (d := first_value(r.get("dense_ppl"))) is not None), None)
        cells[model][name] = Cell({s: float(first_value(r.get("ppl")) or 0.0) for s, r in sorted(by_seed.items())},
                                  dense)
    return cells


def dense_of(cells: dict[str, Cell]) -> float | None:
    """The model's dense perplexity, as its records state it."""
    return next((c.dense for c in cells.values() if c.dense is not None), None)


def _with_change(cell: Cell | None, dense: float | None) -> str:
    if cell is None:
        return MISSING
    change = f" ({100 * (cell.mean - dense) / dense:+.0f} %)" if dense else ""
    return cell.text() + change


def render_tables(cells: dict[str, dict[str, Cell]]) -> Lines:
    """The dense row, then one table per entry of :data:`TABLES`: a column per model, Δ against its dense."""
    dense = {model: dense_of(cells[model]) for model in MODELS}
    lines = table_lines(["", *MODELS.values()], [["dense", *(MISSING if d is None else f"{d:.2f}"
                                                              for d in dense.values())]])
    for title, names in TABLES:
        lines += ["", f"**{title}** (wiki perplexity; in brackets the change against the model's dense)", ""]
        lines += table_lines(["cell", *MODELS.values()],
                             [[name, *(_with_change(cells[m].get(name), dense[m]) for m in MODELS)] for name in names])
    return lines


def compare(a: Cell | None, b: Cell | None) -> tuple[str, int]:
    """The comparison of two cells on one model, and its sign: −1 a lower, +1 a higher, 0 within noise or unknown."""
    if a is None or b is None:
        return MISSING, 0
    change = 100 * (a.mean - b.mean) / b.mean
    spreads = [s for s in (a.spread, b.spread) if s is not None]
    text = f"{a.mean:.2f} vs {b.mean:.2f} ({change:+.1f} %"
    if spreads and abs(a.mean - b.mean) < max(spreads):
        return text + f", within noise: spread {max(spreads):.2f})", 0
    noise = f"spread {max(spreads):.2f}" if spreads else "noise not measured: one seed"
    return text + f"; {noise})", -1 if change < 0 else 1


def render_findings(cells: dict[str, dict[str, Cell]]) -> Lines:
    """Each finding on both models, and whether they agree."""
    lines = ["", "**Where the two models agree and where they disagree** (computed from the cells above)", ""]
    for what, a, b in FINDINGS:
        results = {model: compare(cells[model].get(a), cells[model].get(b)) for model in MODELS}
        signs = {sign for _, sign in results.values()}
        measured = all(text != MISSING for text, _ in results.values())
        verdict = ("not measured on both" if not measured else "the models agree" if signs in ({-1}, {1})
                   else "they DISAGREE" if signs == {-1, 1} else "within noise on at least one model")
        parts = "; ".join(f"{MODELS[m]} {text}" for m, (text, _) in results.items())
        lines.append(f"- {what} (`{a}` vs `{b}`): {parts}: **{verdict}**.")
    return [*lines, "", *ranking_lines(cells)]


def ranking_lines(cells: dict[str, dict[str, Cell]]) -> Lines:
    """The order of the 50 % pruners measured on both models, per model."""
    names = [n for n in TABLES[0][1] if all(n in cells[m] for m in MODELS)]
    if len(names) < 2:
        return [f"- The 50 % ranking: {MISSING} (fewer than two methods measured on both models)."]
    orders = {m: sorted(names, key=lambda n, m=m: cells[m][n].mean) for m in MODELS}
    same = len({tuple(order) for order in orders.values()}) == 1
    text = "; ".join(f"{MODELS[m]}: " + " < ".join(n.split("@")[0] for n in order) for m, order in orders.items())
    return [f"- The 50 % ranking of the {len(names)} methods measured on both (lowest perplexity first): {text}: "
            f"**{'the same order' if same else 'a different order'}**."]


def quick_ranking_lines(records: list[Record], cells: dict[str, dict[str, Cell]]) -> Lines:
    """Per model, the 50 % methods ranked on the quick preset (``bench_preset_ranking.py``) and on the CPU protocol,
    over the methods measured on both, and whether the orders agree."""
    lines = ["", "**The quick preset's ranking against the CPU protocol's** (50 %, seed 0; quick: 16 × 128 "
             "calibration tokens, the first 16 windows of 128)", ""]
    for model, label in MODELS.items():
        quick = {cell_name(r): float(first_value(r.get("ppl")) or 0.0) for r in records
                 if r.get("benchmark") == "preset_ranking" and r.get("preset") == "quick"
                 and r.get("model", "smollm2-135m") == model and first_value(r.get("ppl")) is not None}
        names = [n for n in TABLES[0][1] if n in quick and n in cells[model] and 0 in cells[model][n].by_seed]
        if len(names) < 2:
            lines.append(f"- {label}: {MISSING} (fewer than two methods on both protocols).")
            continue
        by_quick = sorted(names, key=lambda n: quick[n])
        by_cpu = sorted(names, key=lambda n, m=model: cells[m][n].by_seed[0])
        same = "the same order" if by_quick == by_cpu else "a different order"
        lines.append(f"- {label}: quick " + " < ".join(f"{n.split('@')[0]} {quick[n]:.2f}" for n in by_quick)
                     + "; CPU protocol " + " < ".join(f"{n.split('@')[0]} {cells[model][n].by_seed[0]:.2f}"
                                                       for n in by_cpu) + f": **{same}**.")
    return lines


def render_models(paths: list) -> Lines:
    """The section's tables and findings."""
    records = records_of(paths)
    cells = collect(records)
    return render_tables(cells) + render_findings(cells) + quick_ranking_lines(records, cells)


SMOLLM2_FILES = ("quick_ranking.jsonl", "cpu_full_baselines.jsonl", "cpu_full_fista_thanos.jsonl",
                 "cpu_full_fista_more.jsonl", "cpu_full_48.jsonl", "cpu_oneshot_cells.jsonl", "cpu_permute.jsonl",
                 "cpu_ria.jsonl",
                 "cpu_awp_full.jsonl", "awp_step_cpu.jsonl", "cpu_depth.jsonl", "cpu_struct_full.jsonl",
                 "cpu_struct_seeds.jsonl",
                 "cpu_seeds.jsonl")  # named one by one: a name is read even where another section claims it

MODELS_SECTIONS = [
    Section(
        "Two models: SmolLM2-135M and Gemma-3-270M side by side (all windows)",
        ("gemma_cpu_*.jsonl", "gemma_quick_ranking.jsonl", *SMOLLM2_FILES),
        render_models,
        "Every headline cell of the CPU protocol on both embedded models, so that a finding about pruning can be "
        "told from a finding about one model. Calibration `wiki` train 32 × 512; evaluation `wiki` test at seqlen "
        "512, every window (SmolLM2: 210 windows; Gemma: 203, its tokenizer differs). Gemma-3-270M base is held in "
        "bfloat16 (its Q4_K_M GGUF dequantized once) and every window starts with BOS; SmolLM2 is held in float32. "
        "The Gemma runs were measured on a 2-core AMD EPYC with AVX512-BF16, one benchmark process at a time beside "
        "the developer's tests; the SmolLM2 cells are the records of the sections below. Calibration seed 0 unless "
        "a cell says n > 1.",
        """B="python -m benchmarks.bench_prune --model gemma-3-270m --out runs_bench"
$B --runs wanda@50% sparsegpt@50% thanos@50% magnitude@50% --json benchmarks/results/gemma_cpu_oneshot.jsonl
$B --runs wanda@2:4 wanda@2:4:permute=1 sparsegpt@2:4 sparsegpt@2:4:permute=1 \\
      --json benchmarks/results/gemma_cpu_oneshot.jsonl
$B --runs rtn@int4 gptq@int4 awq@int4 awp@int4 awp@int4:quant_init=gptq,grid_update=nearest \\
      --json benchmarks/results/gemma_cpu_quant.jsonl
$B --runs "depth@structured:2 layers" --json benchmarks/results/gemma_cpu_structured.jsonl
$B --seed 1 --runs wanda@50% --json benchmarks/results/gemma_cpu_oneshot.jsonl
OMP_NUM_THREADS=1 $B --no-dense --seed 1 --runs sparsegpt@50% thanos@50% \\
    --json benchmarks/results/gemma_cpu_oneshot.jsonl
OMP_NUM_THREADS=1 $B --no-dense --seed 1 --runs gptq@int4 awq@int4 --json benchmarks/results/gemma_cpu_quant.jsonl
OMP_NUM_THREADS=1 $B --no-dense --runs wanda@60% sparsegpt@60% thanos@60% \\
    --json benchmarks/results/gemma_cpu_oneshot.jsonl
OMP_NUM_THREADS=1 $B --no-dense --seed 2 --runs wanda@50% sparsegpt@50% thanos@50% \\
    --json benchmarks/results/gemma_cpu_oneshot.jsonl
OMP_NUM_THREADS=1 $B --no-dense --seed 2 --runs gptq@int4 awq@int4 --json benchmarks/results/gemma_cpu_quant.jsonl
S="python -m benchmarks.bench_prune --model smollm2-135m --out runs_bench --no-dense"
OMP_NUM_THREADS=1 $S --seed 1 --runs wanda@50% sparsegpt@50% thanos@50% gptq@int4 awq@int4 \\
    --json benchmarks/results/cpu_seeds.jsonl
python -m benchmarks.bench_prune --model smollm2-135m --no-dense --runs awp@int4:quant_init=gptq,grid_update=nearest \
      --json benchmarks/results/cpu_awp_full.jsonl
python -m benchmarks.bench_preset_ranking --model gemma-3-270m --protocol quick --threads 1 \
      --runs magnitude@50% wanda@50% sparsegpt@50% thanos@50% --json benchmarks/results/gemma_quick_ranking.jsonl""",
    ),
]
