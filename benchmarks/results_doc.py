"""Generate ``docs/results.md`` from the raw measurements in ``benchmarks/results/``.

    python -m benchmarks.results_doc            # (re)write docs/results.md
    python -m benchmarks.results_doc --check    # exit 1 if docs/results.md is not what this would write

Every number on the page is read from a JSON / JSONL file under ``benchmarks/results/``; the prose kept
here is the protocol and the commands, taken from the README. The page's date is the newest run
timestamp found in the files (run ids such as ``20261124-132117-…``), never the day it is generated.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.results_allocation import ALLOCATION_SECTIONS
from benchmarks.results_awp_step import AWP_STEP_SECTIONS
from benchmarks.results_depth import DEPTH_SECTIONS
from benchmarks.results_engine import ENGINE_SECTIONS
from benchmarks.results_frontier import FRONTIER_SECTIONS, draw_png
from benchmarks.results_lesson_class import LESSON_CLASS_SECTIONS
from benchmarks.results_llamacpp import LLAMACPP_SECTIONS, draw_pngs
from benchmarks.results_models import MODELS_SECTIONS
from benchmarks.results_oneshot import ONESHOT_SECTIONS
from benchmarks.results_permute import PERMUTE_SECTIONS
from benchmarks.results_presets import PRESET_SECTIONS
from benchmarks.results_read import RESULTS, ROOT, Lines, Section, commits, protocol_lines, records_of, rel, stamps
from benchmarks.results_render import (
    render_app_load,
    render_awp_40w,
    render_awp_full,
    render_awp_solver,
    render_dashboard,
    render_decode_ab,
    render_digests,
    render_distributed,
    render_eval_memory,
    render_generic,
    render_lesson,
    render_ppl_grid,
    render_quant_layer,
    render_runs,
    render_struct_grid,
    render_struct_seeds,
    render_structured_speed,
    render_zeroshot,
)
from benchmarks.results_scale import SCALE_SECTIONS

PAGE = ROOT / "docs" / "results.md"
COMMAND = "python -m benchmarks.results_doc"


# ---------------------------------------------------------------- the page


SECTIONS = [
    *MODELS_SECTIONS,
    *LLAMACPP_SECTIONS,
    Section(
        "Perplexity grid: unstructured, n:m and structured:30% (all 210 windows)",
        ("cpu_full_baselines.jsonl", "cpu_full_fista_thanos.jsonl", "cpu_full_fista_more.jsonl",
         "cpu_full_48.jsonl", "cpu_full_structured.jsonl", "cpu_full_fista_ablation.jsonl", "cpu_full_*.jsonl"),
        render_ppl_grid,
        "Measured on this project's development machine (AMD EPYC, 2 cores, AVX2 only, no GPU), one benchmark "
        "process at a time. Model `smollm2-135m` (Q4_1 GGUF, dequantized); calibration `wiki` train, seed 0; "
        "evaluation `wiki` test, seqlen 512, all windows. Every method's default options unless the row says "
        "otherwise; engine defaults (`sequential=group`, fused pass, `propagate=pruned`). \"achieved\" is the "
        "fraction of zeros over all pruned linears: Thanos keeps its α outlier rows dense (the paper's protocol). "
        "The 50 % and 2:4 baseline rows were measured before the heap setting of `toolkit/runtime/memory.py` "
        "landed, and FISTAPruner 2:4 and 4:8 overlapped a full test-suite run, so their times are inflated.",
        """B="python -m benchmarks.bench_prune --out runs_bench"
$B --runs wanda@50% sparsegpt@50% magnitude@50% wanda@2:4 sparsegpt@2:4 magnitude@2:4 \\
      --json benchmarks/results/cpu_full_baselines.jsonl
$B --runs fista@50% thanos@50% fista@2:4 thanos@2:4:alpha=0.1 --json benchmarks/results/cpu_full_fista_thanos.jsonl
$B --runs thanos@4:8:alpha=0.1 sparsegpt@4:8 wanda@4:8 magnitude@4:8 --json benchmarks/results/cpu_full_48.jsonl
$B --runs thanos@structured:30%:alpha=0 thanos@structured:30%:alpha=0.1 sparsegpt@structured:30% \\
      wanda@structured:30% magnitude@structured:30% --json benchmarks/results/cpu_full_structured.jsonl
$B --runs fista@4:8 fista@70% sparsegpt@70% wanda@70% --json benchmarks/results/cpu_full_fista_more.jsonl
$B --runs fista@50%:error_correction=false --json benchmarks/results/cpu_full_fista_ablation.jsonl
$B --runs fista@50% --propagate dense --json benchmarks/results/cpu_full_fista_ablation.jsonl""",
    ),
    Section(
        "Speed: Wanda and SparseGPT at 50 % (`--no-eval`)",
        ("cpu_speed.jsonl",),
        render_runs,
        "A quiet machine with the code of the commit shown, `--no-eval` (pruning only). Timings on the shared "
        "2-core host vary by about ±15 % between runs.",
        "python -m benchmarks.bench_prune --no-eval --runs wanda@50% sparsegpt@50% "
        "--json benchmarks/results/cpu_speed.jsonl",
    ),
    Section(
        "AWP and the quantizers on SmolLM2-135M (all 210 windows)",
        ("cpu_awp_full.jsonl", "cpu_full_baselines.jsonl", "cpu_full_fista_thanos.jsonl",
         "cpu_full_fista_more.jsonl"),
        render_awp_full,
        "The CPU protocol (`smollm2-135m`, calibration wiki train, seed 0; evaluation wiki test, seqlen 512, all "
        "windows), two threads, one run at a time with nothing else on the machine. The Wanda, SparseGPT and "
        "FISTAPruner cells at 50 % and 70 % are the all-window rows of the perplexity grid above "
        "(`cpu_full_*.jsonl`). Group 128, asymmetric min-max grid; bits per weight count the fp16 scale and zero "
        "point of every group. Several quantize and joint runs ran beside the test suite, so their seconds say "
        "little; the `step_dtype=bfloat16` and `prune_iters=100` rows were measured on a later AMD EPYC host "
        "with AVX-512 BF16.",
        """B="python -m benchmarks.bench_prune --json benchmarks/results/cpu_awp_full.jsonl --runs"
$B awp@50%; $B rtn@int4 gptq@int4 awq@int4 awp@int4; $B awp@60% wanda@60% sparsegpt@60%; $B awp@70%; $B fista@60%
$B awp@int3 rtn@int3 gptq@int3 awq@int3; $B rtn@int2 gptq@int2 awq@int2 awp@int2
for p in 25% 50% 75%; do $B awp@$p+int4 wanda+awq@$p+int4 awq+wanda@$p+int4; done
python -m benchmarks.bench_prune --runs awp@50%:step_dtype=bfloat16 --json benchmarks/results/cpu_awp_full.jsonl
python -m benchmarks.bench_prune --runs awp@50%:prune_iters=100 --json benchmarks/results/cpu_awp_full.jsonl""",
    ),
    Section(
        "AWP and the quantizers: timing runs (`--no-eval`, alternating)",
        ("cpu_awp_speed.jsonl",),
        render_runs,
        "`--no-eval` runs, GPTQ INT4 and SparseGPT 50 % alternating in one process, then AWP 50 % on the later "
        "AMD host. Both sweeps run many tiny per-column updates on two threads and stall whenever the host takes "
        "a CPU away, hence `process_cpu_seconds` and `host_steal_share` beside the wall time.",
        """python -m benchmarks.bench_prune --no-eval --runs gptq@int4 sparsegpt@50% gptq@int4 sparsegpt@50% \\
      --json benchmarks/results/cpu_awp_speed.jsonl
python -m benchmarks.bench_prune --no-eval --runs awp@50% --json benchmarks/results/cpu_awp_speed.jsonl""",
    ),
    Section(
        "AWP solver on one layer's seven linears",
        ("cpu_awp_solver_before.jsonl", "cpu_awp_solver_after.jsonl", "cpu_awp_solver_bf16.jsonl"),
        render_awp_solver,
        "`bench_awp_solver.py`: the AWP pruning solver alone (200 PGD steps, 50 %) on the seven linears of one "
        "smollm2-135m layer, two threads. `before` / `after`: the row projection before and after it started from "
        "the previous step's mask (earlier hosts). `bf16 float32` / `bf16 bfloat16`: the later AMD EPYC host with "
        "AVX-512 BF16, `--step-dtype float32` and `bfloat16`. The matmul floor is the time of the 200 matmuls "
        "alone.",
        """python -m benchmarks.bench_awp_solver   # before / after the projection change (cpu_awp_solver_*.jsonl)
for d in float32 bfloat16; do python -m benchmarks.bench_awp_solver --shapes smollm2 --repeats 2 \\
  --step-dtype $d --json benchmarks/results/cpu_awp_solver_bf16.jsonl; done""",
    ),
    Section(
        "AWP and the quantizers on SmolLM2-135M (first 40 evaluation windows)",
        ("cpu_awp_quant_40w.jsonl",),
        render_awp_40w,
        "`smollm2-135m`, calibration wiki train, seed 0; evaluation wiki test, seqlen 512, the first 40 of the "
        "210 windows, so these numbers are not comparable with the all-window tables. One thread each, while "
        "browser tests ran on the other core, so the times say little. Group 128, asymmetric min-max grid; bits "
        "per weight count the fp16 scale and zero point of every group.",
        """export OMP_NUM_THREADS=1 PRUNELAB_THREADS=1
for r in rtn@int4 awp@int4 gptq@int4 awq@int4 awp@50% wanda@50% rtn@int3 awp@int3 gptq@int3 awq@int3; do
  python -m benchmarks.bench_prune --eval-windows 40 --runs $r --json benchmarks/results/cpu_awp_quant_40w.jsonl
done""",
    ),
    Section(
        "Quantizers and pruners on one SmolLM2-sized linear",
        ("cpu_quant_layer.jsonl",),
        render_quant_layer,
        "`bench_quant_layer.py` on the two SmolLM2 MLP shapes with its default correlated Gram (random "
        "covariance, uneven column scales); W ~ N(0, 1), the same statistics for every method; `rel_error` = "
        "‖ΔW X‖/‖W X‖ from the Gram, seconds the best of the repeats after a warm-up. The README does not name "
        "this file or its command; the command below is the module docstring's default invocation, which prints "
        "these JSON lines.",
        "python -m benchmarks.bench_quant_layer > benchmarks/results/cpu_quant_layer.jsonl",
    ),
    Section(
        "Evaluation memory",
        ("eval_memory_smollm2_*.json",),
        render_eval_memory,
        "Each implementation runs in its own process on the same model and windows (wiki test, first windows of "
        "the given seqlen): full-vocabulary float32 logits per batch (before) against the chunked output head of "
        "`toolkit/evaluation/perplexity.py` (after). Peak RSS via `VmHWM` after resetting the high-water mark "
        "once the model is loaded.",
        "python -m benchmarks.bench_eval_memory --model smollm2-135m --seqlen 1024 --windows 8",
    ),
    Section(
        "Structured pruning on SmolLM2-135M (all 210 windows)",
        ("cpu_struct_full.jsonl",),
        render_struct_grid,
        "`smollm2-135m`, calibration wiki train, seed 0; evaluation wiki test, seqlen 512, all windows; two "
        "threads, one run at a time. The ratio is the share of the attention + MLP parameters removed "
        "(`--unit heads+channels`, one global ranking, the same allocation code for every method); `thanos` and "
        "`sparsegpt` at structured:30% zero input columns and do not remove them. The first run (numerical 30 %) "
        "ran with part of the host's CPU stolen (`host_steal_share` in the file).",
        """for r in numerical flap wanda-sp magnitude-sp; do for p in 10% 20% 30% 50%; do
  python -m benchmarks.bench_prune --runs $r@structured:$p --json benchmarks/results/cpu_struct_full.jsonl
done; done
python -m benchmarks.bench_prune --runs thanos@structured:30% sparsegpt@structured:30% \\
  --json benchmarks/results/cpu_struct_full.jsonl
python -m benchmarks.bench_prune --runs numerical@structured:10%:budget=at_most flap@structured:10%:budget=at_most \\
  --json benchmarks/results/cpu_struct_full.jsonl""",
    ),
    Section(
        "Structured pruning: other calibration seeds",
        ("cpu_struct_seeds.jsonl",),
        render_struct_seeds,
        "Everything as in the all-window structured grid except the calibration draw (`--seed 1`, `--seed 2`).",
        """for seed in 1 2; do python -m benchmarks.bench_prune --seed $seed --runs numerical@structured:10% \\
  flap@structured:10% --json benchmarks/results/cpu_struct_seeds.jsonl; done""",
    ),
    Section(
        "Structured pruning: time to prune (`--no-eval`, alternating)",
        ("cpu_struct_time.jsonl",),
        render_runs,
        "`--no-eval`, numerical structured:30% and SparseGPT 50 % alternating in one process, two threads.",
        """python -m benchmarks.bench_prune --no-eval --runs numerical@structured:30% sparsegpt@50% \\
  numerical@structured:30% sparsegpt@50% --json benchmarks/results/cpu_struct_time.jsonl""",
    ),
    Section(
        "Structured pruning on SmolLM2-135M (first 40 evaluation windows)",
        ("cpu_struct_40w.jsonl",),
        render_struct_grid,
        "`smollm2-135m`, calibration wiki train, seed 0, evaluation wiki test seqlen 512, the first 40 windows; "
        "one thread per run, the 2-core CPU shared with other jobs (the times are loose: the first four runs "
        "overlapped heavy load, and the numerical 10 % run shared the machine with five other jobs).",
        """OMP_NUM_THREADS=1 python -m benchmarks.bench_prune --eval-windows 40 --runs \\
  numerical@structured:10% flap@structured:10% wanda-sp@structured:10% magnitude-sp@structured:10% \\
  numerical@structured:30% ... magnitude-sp@structured:50% thanos@structured:30% sparsegpt@structured:30% \\
  sparsegpt@50% --json benchmarks/results/cpu_struct_40w.jsonl""",
    ),
    Section(
        "Structured pruning: size and speed of the saved model",
        ("structured_speed_smollm2_cpu.json", "structured_speed_*.json"),
        render_structured_speed,
        "The model is pruned by the block engine, saved, and loaded back with `toolkit.load_model`; greedy "
        "generation (batch 1, a 64-token prompt from the wiki test text, 128 new tokens, KV cache on) and prefill "
        "latency, one run after the other on a shared machine, so decode speed between the two forms is not "
        "comparable (the dense rate itself moved between the runs). The uniform form (`--set uniform=true`) keeps "
        "the same counts in every layer and loads in plain transformers.",
        """OMP_NUM_THREADS=1 python -m benchmarks.bench_structured_speed --method numerical --ratio 30%
OMP_NUM_THREADS=1 python -m benchmarks.bench_structured_speed --method numerical --ratio 30% --set uniform=true""",
    ),
    Section(
        "Structured pruning: decode speed in alternation",
        ("decode_ab_*.json",),
        render_decode_ab,
        "`bench_decode_ab.py`: both models loaded once, dense and pruned generating in turn, the order flipped "
        "every round, so both see the same neighbours; greedy, batch 1. The checkpoint is the CLI's `prune "
        "--method numerical --sparsity structured:30% --unit heads+channels --eval none --save-model` on the CPU "
        "protocol. The machine was loaded during the run, so the absolute rates are low; the median ratio is the "
        "figure.",
        "python -m benchmarks.bench_decode_ab --pruned runs/<run>/model --rounds 5 --threads 1",
    ),
    Section(
        "Zero-shot accuracy after pruning at 50 %",
        ("zeroshot/*.json",),
        render_zeroshot,
        "`smollm2-135m`, offline (the validation copies of the seven tasks), lm-evaluation-harness through "
        "`toolkit.evaluation.harness.CodecLM`, 0 shots, one thread, calibration wiki seed 0; the CPU was shared "
        "with other jobs, so the seconds are loose. Accuracy in %, each task's headline metric; the last row is "
        "the dense binomial standard error, so a gap smaller than about two of those is noise.",
        """T=boolq,rte,hellaswag,winogrande,arc_easy,arc_challenge,openbookqa
for m in wanda sparsegpt thanos fista; do
  python -m toolkit prune --model smollm2-135m --method $m --sparsity 50% --eval none --tasks $T \\
      --task-limit 40 --generate --threads 1 --json benchmarks/results/zeroshot/zs_$m.json
done
python -m benchmarks.table_zeroshot benchmarks/results/zeroshot/zs_*.json""",
    ),
    Section(
        "Distributed and bf16 (CPU)",
        ("cpu_distributed.jsonl",),
        render_distributed,
        "CPU protocol for the calibration (wiki train, seed 0); perplexity on the first 40 windows of wiki test "
        "at seqlen 512; 2 cores, AMX-bf16; machine shared with other jobs, so the times are noisy. torchrun gives "
        "each rank `OMP_NUM_THREADS=1`; with default threads the one process used both cores.",
        """python -m benchmarks.bench_distributed --eval-windows 40 --json benchmarks/results/cpu_distributed.jsonl
python -m benchmarks.bench_distributed --only distributed --threads 1 --eval-windows 40 \\
      --json benchmarks/results/cpu_distributed.jsonl""",
    ),
    Section(
        "App: page load while runs queue",
        ("app_load_server_quiet.json",),
        render_app_load,
        "A quiet machine; five FISTAPruner runs submitted in the server process (the handler behind Run), so no "
        "live page shares the machine with the one being loaded; page loads timed in headless Chromium. The raw "
        "file starts with one server log line before its JSON object; the generator skips it.",
        "python -m benchmarks.bench_app_load --submit server --nsamples 256",
    ),
    Section(
        "App: the Lesson tab with its runs in the store",
        ("cpu_lesson.jsonl",),
        render_lesson,
        "The Lesson (magnitude, Wanda, SparseGPT and FISTAPruner at 50 % on `smollm2-135m`, quick protocol) with "
        "its four runs already in the store; 2 CPU cores shared with other jobs. `seconds` is the whole call; the "
        "status line gives the app's own figure.",
        """for m in magnitude wanda sparsegpt fista; do
  python -m toolkit prune --model smollm2-135m --method $m --sparsity 50% --nsamples 8 --seqlen 128 \\
      --eval-seqlen 128 --eval-windows 16 --eval-dense --generate --out runs
done
python -m benchmarks.bench_lesson --runs runs     # the Lesson with its four runs in the store, one JSON line""",
    ),
    Section(
        "App: dashboard on SmolLM2-135M",
        ("dashboard_smollm2.json",),
        render_dashboard,
        "One measurement on a quiet machine (the 2-core CPU with no other job running): the app's default quick "
        "protocol, Wanda 50 %, the dense perplexity evaluated (`--cold-dense` hides the cached one), then "
        "SparseGPT for Compare. Seconds after the click, as the page recorded them.",
        "python -m benchmarks.dashboard_screens --model smollm2-135m --cold-dense "
        "--out benchmarks/results/dashboard_smollm2.json",
    ),
    *SCALE_SECTIONS,
    *ENGINE_SECTIONS,
    *ALLOCATION_SECTIONS,
    *PRESET_SECTIONS,
    *DEPTH_SECTIONS,
    *FRONTIER_SECTIONS,
    *PERMUTE_SECTIONS,
    *ONESHOT_SECTIONS,
    *LESSON_CLASS_SECTIONS,
    *AWP_STEP_SECTIONS,
    Section(
        "Weight digests: did a change move any pruned weight?",
        ("digest_*.jsonl",),
        render_digests,
        "Each method is run on the same calibration at two commits, the pruned checkpoint fingerprinted (SHA-256 "
        "over every decoder linear's weight bytes, plus per-linear sums of |w|), and the two compared. "
        "`digest_*_contract`: `smollm2-135m`, the CPU protocol's calibration, before (`baf3940`) and after the "
        "spec/scope/result-kind refactor. `digest_tiny_*`: `tiny-llama`, 16 × 128 calibration tokens, "
        "`OMP_NUM_THREADS=1 PRUNELAB_THREADS=1` (with other thread counts the solvers' summation order changes, so "
        "compare digests taken with the same threads). Identical weights give identical perplexity. "
        "`digest_*house*`: the move of `toolkit/` into packages, before at `01456b7` and after, one thread each: "
        "24 tiny-llama runs (the ten above, AWP, GPTQ, Numerical Pruning, RTN), three embedded-model runs taken "
        "at both commits, and the ten embedded-model runs after the move against the digests recorded after the "
        "contract refactor (which the three runs at `01456b7` reproduced). `digest_tiny_scale`: the 24 tiny-llama "
        "runs after the real-scale change (the model's own dtype, one layer upcast at a time, sampled error "
        "statistics, the journal's spill), float32 path, against `digest_tiny_house_after`. "
        "`digest_tiny_engine_before` → `digest_tiny_engine_after`: 14 tiny-llama runs (16 × 128 calibration "
        "tokens) at `19b6a00` and at `1689509`, around the engine-floor changes (no copy of W for the methods that "
        "only read it, Wanda's row blocks, Thanos's exact selection from a fixed sample, in-place solve updates, "
        "row-chunked quantization grids and packing, `--error`), float32 path. `digest_tiny_engine_after` → "
        "`digest_tiny_select_after`: the same 14 runs at `e0af220`, after Thanos's residual mask took its counts "
        "from the sampled band and reused its buffers, and one row-chunk rule (`toolkit/methods/chunks.py`) "
        "replaced two.",
        """python -m benchmarks.weights_digest --runs magnitude@50% magnitude@2:4 wanda@50% wanda@2:4 sparsegpt@50% \\
      sparsegpt@2:4 thanos@50% thanos@2:4 fista@50% fista@2:4 --json benchmarks/results/digest_after_contract.jsonl
python -m benchmarks.weights_digest --compare benchmarks/results/digest_before_contract.jsonl \\
      benchmarks/results/digest_after_contract.jsonl
python -m benchmarks.weights_digest --model tiny-llama --nsamples 16 --seqlen 128 --runs magnitude@50% … fista@2:4 \\
      --json after.jsonl
python -m benchmarks.weights_digest --compare before.jsonl after.jsonl""",
    ),
]


def section_files(section: Section, claimed: set[Path]) -> list[Path]:
    """The section's existing files, its patterns in order, each once; a glob skips files earlier sections took."""
    found: list[Path] = []
    for pattern in section.patterns:
        matches = sorted(RESULTS.glob(pattern))
        for path in matches:
            if path not in found and ((len(matches) == 1 and "*" not in pattern) or path not in claimed):
                found.append(path)
    return found


def provenance(paths: list[Path]) -> Lines:
    """Raw file names, the run timestamps found in them and the commits they name."""
    lines = ["Raw files: " + ", ".join(f"`{rel(p)}`" for p in paths) + "."]
    found = stamps(paths)
    span = " to ".join(dict.fromkeys([found[0], found[-1]])) if found else ""
    lines.append(f"Timestamps of the runs these files name: {span}." if found else "These files record no date.")
    named = commits(records_of(paths))
    if named:
        lines.append("Code commits named in the records: " + ", ".join(f"`{c}`" for c in named) + ".")
    return [" ".join(lines)]


def render_section(section: Section, paths: list[Path]) -> Lines:
    """One section: title, provenance, protocol prose and recorded protocols, command, tables."""
    lines = [f"## {section.title}", "", *provenance(paths), "", section.protocol, ""]
    recorded = protocol_lines(records_of(paths))
    if recorded:
        lines += ["Protocol as the records state it:", "", *recorded, ""]
    if section.command:
        lines += ["Command that regenerates the raw file(s):", "", "```bash", section.command, "```", ""]
    return lines + section.render(paths) + [""]


def header(paths: list[Path]) -> Lines:
    """The page's title and dated, generated-by note."""
    newest = max(((s, p) for p in paths for s in stamps([p])), default=None)
    date = (f"Newest measurement: **{newest[0][:10]}** (the latest run timestamp in the raw files, "
            f"`{rel(newest[1])}`)." if newest else "The raw files record no date.")
    return ["# PruneLab: measured results", "",
            f"_Generated by `{COMMAND}` from the raw measurements in `benchmarks/results/`; do not edit by hand "
            f"(`{COMMAND} --check` fails when this page is out of date)._ {date}", "",
            "Every number below is read from the raw file its section names. Prose (machine, load, protocol "
            "choices) is the README's description of how the files were produced.", ""]


def build_page() -> str:
    """The whole page, as ``docs/results.md`` should hold it."""
    claimed: set[Path] = set()
    body: Lines = []
    contents: Lines = []
    for section in SECTIONS:
        paths = section_files(section, claimed)
        if not paths:
            continue
        claimed.update(paths)
        body += render_section(section, paths)
        contents.append(f"- {section.title}")
    everything = sorted(p for p in RESULTS.rglob("*") if p.suffix in {".json", ".jsonl"})
    rest = [p for p in everything if p not in claimed]
    if rest:
        other = Section("Other raw files", (), render_generic, "Files no section above renders, as generic tables.")
        body += render_section(other, rest)
        contents.append(f"- {other.title}")
    return "\n".join([*header(everything), "Sections:", "", *contents, "", *body]).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write ``docs/results.md``, or with ``--check`` exit 1 when it differs from what would be written."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with docs/results.md instead of writing it")
    args = parser.parse_args(argv)
    page = build_page()
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else None
        if current != page:
            print(f"{rel(PAGE)} is out of date with benchmarks/results/: run `{COMMAND}`")
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {rel(PAGE)}")
    drawn = draw_png()  # the frontier section's figure, when it has records
    for path in ([drawn] if drawn is not None else []) + draw_pngs():  # and the served frontier's, per model
        print(f"wrote {rel(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
