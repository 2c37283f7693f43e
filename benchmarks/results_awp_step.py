"""The AWP step-size tables of ``docs/results.md``: quantization perplexity per step rule, and the diagnosis.

Records: ``bench_prune`` runs of AWP with ``step``/``stop`` options (``awp_step_cpu.jsonl``) beside the
RTN / GPTQ / AWQ / AWP rows of the same protocol (``cpu_awp_full.jsonl``: their ``int4`` and ``int3``
ran at group 128, the default of that time, as their bits per weight 4.169 and 3.161 show), and the
per-linear records of ``bench_awp_diagnose.py`` (``awp_diagnose_cpu.jsonl``).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from benchmarks.results_read import Lines, Record, Section, commits, num, records_of, run_stamp, table_lines

GRIDS = ("int4:g128", "int3:g128", "50%+int4:g128")
BASELINES = ("rtn", "gptq", "awq", "wanda+awq", "awq+wanda")  # the last two: the joint row's pipelines
VARIANTS: tuple[tuple[str, str, dict[str, str]], ...] = (  # (key, column label, the run's AWP options)
    ("paper", "step=paper", {}),
    ("spectral", "step=spectral", {"step": "spectral"}),
    ("backtracking", "step=backtracking", {"step": "backtracking"}),
    ("nearest", "grid_update=nearest", {"grid_update": "nearest"}),
    ("gradient", "stop=gradient", {"stop": "gradient"}),
    ("gradient+best", "stop=gradient, keep_best", {"stop": "gradient", "keep_best": "true"}),
    ("gradient+nearest", "stop=gradient, grid_update=nearest", {"stop": "gradient", "grid_update": "nearest"}),
    ("gptq+nearest", "quant_init=gptq, grid_update=nearest", {"quant_init": "gptq", "grid_update": "nearest"}),
)


def _grid(record: Record) -> str:
    """``int4`` (group 128 at the time of those runs) → ``int4:g128``; labels with a group stay."""
    label = str(record.get("sparsity", ""))
    return label if ":g" in label else f"{label}:g128"


def _variant(record: Record) -> str | None:
    """The variant of an AWP record (:data:`VARIANTS`), None when its options are another combination."""
    options = {k: str(v) for k, v in (record.get("options") or {}).items() if (k, str(v)) != ("step", "paper")}
    return next((key for key, _, wanted in VARIANTS if options == wanted), None)


def _cell(record: Record | None) -> str:
    if record is None or not record.get("ppl"):
        return "not measured"
    ppl = next(iter(record["ppl"].values()))
    return f"{ppl:.2f} ({record['prune_seconds']:.0f} s)"


def render_steps(paths: list[Path]) -> Lines:
    """Perplexity (prune seconds) per grid: the baselines, then AWP with each step rule; – = not applicable."""
    records = [r for r in records_of(paths) if r.get("benchmark") == "prune" and r.get("ppl")
               and ((r.get("protocol") or {}).get("evaluation") or {}).get("all_windows")]
    found: dict[tuple[str, str], Record] = {}
    for r in records:
        key = r["method"] if r["method"] in BASELINES and not r.get("options") else \
            f"awp {_variant(r)}" if r["method"] == "awp" and _variant(r) else None
        older = found.get((_grid(r), key)) if key is not None else None
        if key is not None and (older is None or run_stamp(r) >= run_stamp(older)):
            found[(_grid(r), key)] = r  # the newest record of a cell wins (by its run folder's timestamp)
    columns = [*BASELINES, *(f"awp {v}" for v, _, _ in VARIANTS)]
    headers = ["grid", "RTN", "GPTQ", "AWQ", "Wanda+AWQ", "AWQ+Wanda", *(f"AWP {label}" for _, label, _ in VARIANTS)]
    def cell(grid: str, column: str) -> str:  # a pipeline column only on the joint row, a quantizer only off it
        applies = column not in BASELINES or ("+" in column) == ("%" in grid)
        return _cell(found.get((grid, column))) if applies else "–"

    body = [[grid, *[cell(grid, c) for c in columns]] for grid in GRIDS]
    dense = next((next(iter(r["dense_ppl"].values())) for r in records if r.get("dense_ppl")), None)
    used = list(found.values())
    named = ", ".join(f"`{c}`" for c in commits(used))
    return [*table_lines(headers, body), "", f"Dense perplexity {num(dense, 2)}. Commits: {named}."]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def render_diagnosis(paths: list[Path]) -> Lines:
    """Per linear kind: ‖C‖_F/‖C‖₂, the loss decrease over the iterations and the codes moved, per step rule."""
    records = [r for r in records_of(paths) if r.get("benchmark") == "awp_diagnose"]
    steps = list(dict.fromkeys(r["step"] for r in records))
    names = list(dict.fromkeys(r["name"] for r in records))
    header = ["linear", "‖C‖_F/‖C‖₂ median", "min", "max"]
    for step in steps:
        header += [f"{step}: loss kept (final/RTN)", f"{step}: codes changed"]
    body = []
    for name in [*names, "all"]:
        mine = [r for r in records if name in ("all", r["name"])]
        ratios = [r["c_ratio"] for r in mine if r.get("c_ratio") is not None and r["step"] == steps[0]]
        row = [name, num(_median(ratios), 3), num(min(ratios, default=None), 3), num(max(ratios, default=None), 3)]
        for step in steps:
            runs = [r for r in mine if r["step"] == step and r.get("loss") and r["loss"][0]]
            kept = [r["loss"][-1] / r["loss"][0] for r in runs if r["loss"][-1] is not None]
            moved = [r["codes_changed"] for r in runs if r.get("codes_changed") is not None]
            row += [num(_median(kept), 4), f"{100 * statistics.fmean(moved):.3f} %" if moved else ""]
        body.append(row)
    named = ", ".join(f"`{c}`" for c in commits(records))
    return [*table_lines(header, body), "", f"Commits: {named}."]


def _start(record: Record) -> str:
    return str((record.get("options") or {}).get("quant_init", "rtn"))


def render_against_gptq(paths: list[Path]) -> Lines:
    """Per grid and linear kind, medians over layers: AWP's loss from RTN, GPTQ's, and AWP's from GPTQ's."""
    records = [r for r in records_of(paths) if r.get("benchmark") == "awp_diagnose" and r.get("loss")
               and r["loss"][0] and r["loss"][-1] is not None]
    header = ["grid", "linear", "linears", "AWP from RTN: final / RTN", "GPTQ / RTN", "AWP from GPTQ: final / GPTQ",
              "AWP from GPTQ: final / RTN", "codes off RTN: AWP from RTN", "from GPTQ"]
    body = []
    for grid in dict.fromkeys(r["quant"] for r in records):
        mine = [r for r in records if r["quant"] == grid]
        for name in [*dict.fromkeys(r["name"] for r in mine), "all"]:
            rtn = [r for r in mine if _start(r) == "rtn" and name in ("all", r["name"])]
            gptq = [r for r in mine if _start(r) == "gptq" and name in ("all", r["name"]) and r.get("objective_rtn")]
            g_rtn = [(r["objective_init"] / r["objective_rtn"]) ** 2 for r in gptq]
            refined = [r["loss"][-1] / r["loss"][0] for r in gptq]
            body.append([grid, name, str(len(rtn)), num(_median([r["loss"][-1] / r["loss"][0] for r in rtn]), 3),
                         num(_median(g_rtn), 3), num(_median(refined), 4),
                         num(_median([a * b for a, b in zip(g_rtn, refined, strict=True)]), 3),
                         *(f"{100 * statistics.fmean(c):.2f} %" if c else "" for c in
                           ([r["codes_changed"] for r in rtn if r.get("codes_changed") is not None],
                            [r["codes_changed"] for r in gptq if r.get("codes_changed") is not None]))])
    named = ", ".join(f"`{c}`" for c in commits(records))
    return [*table_lines(header, body), "", f"Commits: {named}."]


AWP_STEP_SECTIONS = [
    Section(
        "AWP's quantization step size (all 210 windows)",
        ("awp_step_cpu.jsonl", "cpu_awp_full.jsonl"),
        render_steps,
        "`smollm2-135m`, CPU protocol: calibration 32 × 512 tokens of `wiki` train, seed 0; evaluation `wiki` "
        "test, seqlen 512, all 210 windows; asymmetric min-max grid, group 128 (the last group of a 576-wide row "
        "is 64 wide). Perplexity, with the prune seconds in brackets. RTN, AWQ and AWP `step=paper` are the "
        "rows of the quantizer table above (an earlier commit, group 128 then the default); GPTQ was measured "
        "again beside `quant_init=gptq` (the newest record of a cell wins); the step variants "
        "ran on the shared 2-core development machine beside other jobs, one thread, so their seconds are loose "
        "upper bounds. \"not measured\": did not fit in the session's time.",
        'python -m benchmarks.bench_prune --runs "awp@int4:g128:step=spectral" \\\n'
        '      --json benchmarks/results/awp_step_cpu.jsonl\n'
        'python -m benchmarks.bench_prune --no-dense --runs "awp@int4:g128:step=backtracking" \\\n'
        '      --json benchmarks/results/awp_step_cpu.jsonl   # no dense re-evaluation (dense_ppl null)\n'
        'python -m benchmarks.bench_prune --no-dense --runs "awp@int3:g128:stop=gradient,grid_update=nearest" \\\n'
        '      --json benchmarks/results/awp_step_cpu.jsonl   # likewise keep_best=true, and int4, 50%+int4\n'
        'python -m benchmarks.bench_prune --no-dense --runs "awp@int3:g128:quant_init=gptq,grid_update=nearest" \\\n'
        '      "gptq@int3:g128" --json benchmarks/results/awp_step_cpu.jsonl   # and int4:g128',
    ),
    Section(
        "AWP quantization diagnosis per linear (INT4 g128, 10 iterations)",
        ("awp_diagnose_cpu.jsonl",),
        render_diagnosis,
        "`bench_awp_diagnose.py` on `smollm2-135m`, calibration 32 × 512 tokens of `wiki` train, seed 0: per "
        "linear kind (30 layers each), ‖C‖_F/‖C‖₂ of the Gram matrix C = XXᵀ/N AWP solves with (‖C‖₂ by 20 "
        "power iterations), the median over linears of the loss tr((W − Θ)C(W − Θ)ᵀ) after the last iteration "
        "divided by its value at round-to-nearest, and the mean fraction of INT4 codes that differ from RTN's.",
        "python -m benchmarks.bench_awp_diagnose --steps paper --json benchmarks/results/awp_diagnose_cpu.jsonl\n"
        "python -m benchmarks.bench_awp_diagnose --from-run runs/<spectral run> runs/<backtracking run> \\\n"
        "      --json benchmarks/results/awp_diagnose_cpu.jsonl",
    ),
    Section(
        "AWP against GPTQ on the same objective, per linear (10 iterations)",
        ("awp_init_cpu.jsonl",),
        render_against_gptq,
        "`bench_awp_diagnose.py` on `smollm2-135m`, calibration 32 × 512 tokens of `wiki` train, seed 0, the paper's "
        "step and 10 iterations; per grid and linear kind, the median over layers of the loss tr((W − Θ)C(W − Θ)ᵀ) "
        "relative to another solution on the same C: AWP started at round-to-nearest (the paper) against RTN; "
        "GPTQ (the start of `quant_init=gptq`, default GPTQ options) against RTN; AWP started at GPTQ's solution "
        "with `grid_update=nearest` against GPTQ and against RTN. Two runs per grid, each propagating its own "
        "quantized layers, so from layer 1 on the two runs' C differ; each ratio is taken within one run. Codes off "
        "RTN: the mean fraction of codes that differ from round-to-nearest's at the end.",
        "python -m benchmarks.bench_awp_diagnose --quant int3:g128 --steps paper \\\n"
        "      --json benchmarks/results/awp_init_cpu.jsonl\n"
        "python -m benchmarks.bench_awp_diagnose --quant int3:g128 --steps paper --set quant_init=gptq \\\n"
        "      --set grid_update=nearest --json benchmarks/results/awp_init_cpu.jsonl   # and int4:g128",
    ),
]
