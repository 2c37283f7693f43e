"""The "Scale" tables of ``docs/results.md``: real-shaped models (``bench_scale.py``) and the model's own dtype.

Records of ``bench_scale.py`` (``"benchmark": "scale"``) give one row each: in memory or streamed, the
host RSS peak over the model's bfloat16 weights, the saved checkpoint; then seconds per phase per layer
and their ratio to the matmul floor. Records with ``"benchmark": "scale_before"`` are the same runs on
the commit before the change (the CLI's result, float32 load), for the before/after comparison.
``"benchmark": "prune"`` records (``bench_prune.py --dtype``) give the embedded model's perplexity per
method and storage dtype.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.results_read import Lines, Record, Section, num, records_of, table_lines

PHASES = ("capture", "copies", "statistics", "solve", "writeback", "propagation", "error")
MIB = 2**20


def _variant(record: Record) -> str:
    if record["benchmark"] == "scale_before":
        return f"before (`{record['commit']}`, float32 load)"
    variant = "streamed (`--stream`)" if record.get("stream") else "in memory"
    return variant + (", `--error none`" if record.get("error") == "none" else "")


def _run(record: Record) -> str:
    return (f"{record['method']} {record.get('sparsity', '50%')}, {record['shape']} × {record['layers']} layers, "
            f"{record['nsamples']} × {record['seqlen']}, {record['device']}")


def _memory_rows(records: list[Record]) -> list[list[str]]:
    rows = []
    for r in records:
        layers = max(int(r["layers"]), 1)
        checkpoint = r.get("checkpoint_bytes")
        dtypes = ", ".join(r.get("checkpoint_dtypes") or [])
        rows.append([_run(r), _variant(r), f"`{(r.get('versions') or {}).get('git', '?')}`",
                     num(float(r["prune_seconds"]), 1),
                     num(float(r["prune_seconds"]) / layers, 1), f"{r['rss_peak_mib']:.0f}",
                     num(r["rss_peak_mib"] * MIB / r["bf16_weight_bytes"], 2),
                     "" if checkpoint is None else f"{checkpoint / MIB:.0f} ({dtypes})"])
    return rows


def _phase_rows(records: list[Record]) -> list[list[str]]:
    rows = []
    for r in records:
        phases, floor = r.get("phases") or {}, r.get("floor_seconds_per_layer")
        if not phases or r["benchmark"] != "scale":
            continue
        layers = max(int(r["layers"]), 1)
        cells = [num(phases.get(p, 0.0) / layers, 2) for p in PHASES]
        passes = sum(phases.get(p, 0.0) for p in ("statistics", "propagation", "error")) / layers
        ratio = f"{passes / floor:.1f} / {float(r['prune_seconds']) / layers / floor:.1f}" if floor else ""
        rows.append([_run(r), _variant(r), *cells, num(floor, 2), ratio])
    return rows


def render_scale(paths: list[Path]) -> Lines:
    """Memory and checkpoint per run (before/after, streamed), then seconds per phase per layer against the floor."""
    records = [r for r in records_of(paths) if r.get("benchmark") in ("scale", "scale_before")]
    lines = table_lines(["run", "engine", "commit", "prune s", "s / layer", "host RSS peak MiB", "RSS / bf16 weights",
                         "checkpoint MiB (dtypes)"], _memory_rows(records))
    phase_rows = _phase_rows(records)
    if phase_rows:
        lines += ["", "Seconds per layer in each phase (`result.json` `phases` over the layer count); the floor is "
                  "two passes of the layer's matrix products over the calibration tokens on the same device "
                  "(`benchmarks/scale_floor.py`); the last column is (statistics + propagation + error) / floor "
                  "and the whole layer / floor.", ""]
        lines += table_lines(["run", "engine", *PHASES, "floor s", "passes / whole ÷ floor"], phase_rows)
    lines += ["", "**On a GPU.** The goals for the full Llama-2-7B shape (32 decoder layers, bfloat16) at 128 × 2048 "
              "calibration tokens on one GPU, beside what `bench_scale` measured there (`--device cuda`, e.g. "
              "`--method wanda --nsamples 128 --seqlen 2048 --json benchmarks/results/scale_gpu.jsonl`). A row reads "
              "\"not measured\" until such a record is in `benchmarks/results/`. FISTAPruner's goal is for the whole "
              "model; measured on fewer layers, its row scales them to 32 and says so.", ""]
    return lines + render_gpu_goals(paths)


# the goals for the full Llama-2-7B shape on one GPU (32 decoder layers, 128 × 2048 calibration tokens): the
# method's prune seconds, and the GPU memory peak of any of them. FISTAPruner's is for the whole model, measured on
# fewer layers and scaled by 32 / layers (said in the row).
GPU_GOALS = (("wanda", 45.0), ("sparsegpt", 100.0), ("fista", 480.0))
GPU_PEAK_GOAL_MIB = 24 * 1000**3 / MIB  # 24 GB
SEVEN_B_LAYERS = 32


def _gpu_records(paths: list[Path]) -> list[Record]:
    """bench_scale records of the Llama-2-7B shape at 128 × 2048 on a CUDA device."""
    return [r for r in records_of(paths)
            if r.get("benchmark") == "scale" and str(r.get("device", "")).startswith("cuda")
            and r.get("shape") == "llama-2-7b" and int(r.get("nsamples", 0)) == 128 and int(r.get("seqlen", 0)) == 2048]


def _goal_row(method: str, goal_s: float, records: list[Record]) -> list[str]:
    runs = [r for r in records if r.get("method") == method]
    if not runs:
        return [method, f"≤ {goal_s:.0f} s", "not measured: no GPU run on record", "", ""]
    best = max(runs, key=lambda r: int(r["layers"]))  # the most layers measured
    layers = int(best["layers"])
    seconds = float(best["prune_seconds"]) * SEVEN_B_LAYERS / layers
    how = "32 layers" if layers == SEVEN_B_LAYERS else f"{layers} layers × {SEVEN_B_LAYERS / layers:g}"
    met = "met" if seconds <= goal_s else "not met"
    return [method, f"≤ {goal_s:.0f} s", f"{seconds:.0f} s ({how}, {best['device']})", met,
            num(best.get("gpu_peak_mib"), 0)]


def render_gpu_goals(paths: list[Path]) -> Lines:
    """The GPU goals for Llama-2-7B beside what ``bench_scale`` measured on a GPU (or "not measured")."""
    records = _gpu_records(paths)
    rows = [_goal_row(method, goal, records) for method, goal in GPU_GOALS]
    peaks = [float(r["gpu_peak_mib"]) for r in records if r.get("gpu_peak_mib") is not None]
    peak = (f"{max(peaks):.0f} MiB ({'met' if max(peaks) <= GPU_PEAK_GOAL_MIB else 'not met'})" if peaks
            else "not measured: no GPU run on record")
    return [*table_lines(["method", "goal (7B, 128 × 2048)", "measured", "", "GPU peak MiB"], rows), "",
            f"GPU memory peak goal ≤ 24 GB ({GPU_PEAK_GOAL_MIB:.0f} MiB): {peak}."]


def render_dtype_ppl(paths: list[Path]) -> Lines:
    """Perplexity per method with the model held in float32 and in bfloat16 (``bench_prune.py --dtype``)."""
    records = [r for r in records_of(paths) if r.get("benchmark") == "prune"]
    by_run: dict[str, dict[str, Record]] = {}
    for r in records:
        storage = (r.get("precision") or {}).get("storage", "?")
        by_run.setdefault(r["run"], {})[storage] = r
    body = []
    for run, pair in by_run.items():
        f32, b16 = pair.get("float32"), pair.get("bfloat16")
        p32 = next(iter(f32["ppl"].values())) if f32 and f32["ppl"] else None
        p16 = next(iter(b16["ppl"].values())) if b16 and b16["ppl"] else None
        change = f"{100 * (p16 - p32) / p32:+.2f} %" if p32 and p16 else ""
        body.append([f"`{run}`", num(p32, 3), num(p16, 3), change])
    return table_lines(["run", "float32 model", "bfloat16 model", "change"], body)


SCALE_SECTIONS = [
    Section(
        "Scale: real-shaped models, memory, checkpoint and phases",
        ("scale_*.jsonl",),
        render_scale,
        "Random-weight checkpoints built from the real configurations (`benchmarks/scale_configs.py`: "
        "Llama-2-7B is hidden 4096, MLP 11008, 32 heads, vocabulary 32000), stored in bfloat16, the first "
        "`layers` decoder layers kept; calibration on the embedded `wiki` text, no evaluation (`--eval none`), "
        "the pruned checkpoint saved. The RSS peak is the process's own high-water mark (`VmHWM`; `ru_maxrss` in "
        "the older records, the same figure for a process started from a shell), the checkpoint built in a child "
        "process so it does not count. `before` rows are the same command on the commit before "
        "the change (the model loaded in float32 and saved in float32). CPU figures are from the 2-core "
        "development machine while other jobs ran on it (seconds are loose upper bounds; memory is not affected). "
        "No GPU figure is on this page: none was measured.",
        "python -m benchmarks.bench_scale --shape llama-2-7b --layers 2 --nsamples 8 --seqlen 512 --device cpu \\\n"
        "      --method wanda --save-model --json benchmarks/results/scale_cpu.jsonl   # and sparsegpt; and --stream",
    ),
    Section(
        "Precision: SmolLM2-135M held in bfloat16",
        ("dtype_embedded.jsonl",),
        render_dtype_ppl,
        "`smollm2-135m` pruned and evaluated with the model held in float32 (`--dtype float32`, the default for "
        "the embedded GGUF) and in bfloat16 (`--dtype bfloat16`); on the CPU the layers run in float32 in both "
        "(one layer upcast at a time), statistics and solves in float32, evaluation in the storage dtype. "
        "Calibration 8 × 256 tokens of `wiki` train, evaluation the first 8 windows of 256 tokens of `wiki` test. "
        "Two methods only: the other ten were cut for time on the shared CPU (the bf16 tests in "
        "`tests/engine/test_bf16_methods.py` cover every method on tiny models and two on this model).",
        "python -m benchmarks.bench_prune --runs magnitude@50% wanda@50% --nsamples 8 --seqlen 256 \\\n"
        "      --eval-seqlen 256 --eval-windows 8 --dtype float32 \\\n"
        "      --json benchmarks/results/dtype_embedded.jsonl   # and --dtype bfloat16",
    ),
]
