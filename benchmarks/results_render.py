"""The tables of ``docs/results.md``, one renderer per family of raw files (see :mod:`benchmarks.results_doc`)."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from benchmarks.results_read import (
    Lines,
    Record,
    achieved_cell,
    first_value,
    num,
    pivot,
    ppl_cell,
    read_records,
    records_of,
    table_lines,
    time_cell,
)
from benchmarks.table import grid, rows, variant
from benchmarks.table_zeroshot import load as load_zeroshot
from benchmarks.table_zeroshot import table as zeroshot_table

# ---------------------------------------------------------------- pruning runs (bench_prune.py)


def ppl_grids(records: list[Record]) -> Lines:
    """Perplexity, prune time / RSS and achieved sparsity grids (variant × pattern) of evaluated runs."""
    evaluated = [r for r in records if r.get("ppl")]
    return ["**Perplexity (wiki test, lower is better)**", "", *grid(evaluated, ppl_cell), "",
            "**Prune seconds / peak RSS MiB**", "", *grid(evaluated, time_cell), "",
            "**Achieved sparsity**", "", *grid(evaluated, achieved_cell)]


def render_ppl_grid(paths: list[Path]) -> Lines:
    """The CPU perplexity grid of the ``cpu_full_*.jsonl`` files (``benchmarks/table.py --grid``)."""
    return ppl_grids(rows([str(p) for p in paths]))


def run_rows(records: list[Record]) -> Lines:
    """One row per prune record, repeats kept: the timing runs."""
    header = ["run", "ppl", "prune s", "total s", "process CPU s", "host steal", "peak RSS MiB", "commit"]
    body = [[r["run"], ppl_cell(r), num(r.get("prune_seconds"), 1), num(r.get("total_seconds"), 1),
             num(r.get("process_cpu_seconds"), 1), num(r.get("host_steal_share"), 4), num(r.get("peak_rss_mb"), 0),
             (r.get("versions") or {}).get("git", "")] for r in records]
    return table_lines(header, body)


def render_runs(paths: list[Path]) -> Lines:
    """The timing files (``--no-eval`` runs, alternating): every run in file order."""
    return run_rows(records_of(paths))


def bits_cell(record: Record) -> str:
    """Bits per weight of the quantized linears (fp16 scale and zero point counted)."""
    return num((record.get("accounting") or {}).get("bits_per_weight"))


def seconds_cell(record: Record) -> str:
    """Prune seconds, one decimal."""
    return num(record.get("prune_seconds"), 1)


def by_ratio(records: list[Record]) -> list[Record]:
    """Records in pattern order: structured before unstructured, then by percentage (stable otherwise)."""
    def key(record: Record) -> tuple[bool, float]:
        found = re.search(r"(\d+(?:\.\d+)?)%", record["sparsity"])
        return (not record["sparsity"].startswith("structured"), float(found.group(1)) if found else 0.0)
    return sorted(records, key=key)


def quant_families(records: list[Record]) -> Lines:
    """Pruning, quantization and pruning + quantization grids (ppl, then bits and seconds)."""
    families = [
        ("pruning", [r for r in records if not r.get("quant")]),
        ("quantization, g128", [r for r in records if r.get("quant") and r["sparsity"] == r["quant"]]),
        ("pruning + quantization, g128",
         by_ratio([r for r in records if r.get("quant") and r["sparsity"] != r["quant"]])),
    ]
    lines: Lines = []
    for name, family in families:
        if not family:
            continue
        lines += ["", f"**wiki ppl, {name}**", "", *grid(family, ppl_cell)]
        if name != "pruning":
            lines += ["", f"**bits per weight, {name}**", "", *grid(family, bits_cell)]
        lines += ["", f"**prune seconds, {name}**", "", *grid(family, seconds_cell)]
    return lines[1:]


def render_awp_full(paths: list[Path]) -> Lines:
    """AWP and the quantizers on all windows; the pruning grid adds the ``cpu_full_*`` rows of the same methods."""
    awp = rows([str(p) for p in paths if p.name.startswith("cpu_awp")])
    pruning = [r for r in awp if not r.get("quant")]
    methods = {r["method"] for r in pruning}
    ratios = {r["sparsity"] for r in pruning}
    extra = [r for r in rows([str(p) for p in paths if p.name.startswith("cpu_full")])
             if r["method"] in methods and r["sparsity"] in ratios and not r["options"]
             and r.get("propagate", "pruned") == "pruned" and r.get("ppl")]
    return quant_families(rows_merged(awp, extra))


def rows_merged(first: list[Record], second: list[Record]) -> list[Record]:
    """``first`` then the records of ``second`` whose variant and pattern ``first`` lacks."""
    have = {(variant(r), r["sparsity"]) for r in first}
    return first + [r for r in second if (variant(r), r["sparsity"]) not in have]


def render_awp_40w(paths: list[Path]) -> Lines:
    """AWP and the quantizers on the first 40 windows."""
    return quant_families(rows([str(p) for p in paths]))


def solver_series(paths: list[Path]) -> list[tuple[str, list[Record], Record]]:
    """``(label, per-linear records, total record)`` per solver sweep; a sweep ends at its ``total`` record."""
    series: list[tuple[str, list[Record], Record]] = []
    for path in paths:
        linears: list[Record] = []
        for record in read_records(path):
            if record.get("shape") != "total":
                linears.append(record)
                continue
            dtype = linears[0].get("step_dtype") if linears else None
            label = path.stem.removeprefix("cpu_awp_solver_") + (f", step_dtype={dtype}" if dtype else "")
            series.append((label, linears, record))
            linears = []
    return series


def render_awp_solver(paths: list[Path]) -> Lines:
    """``bench_awp_solver.py``: per-linear solve seconds and the per-layer totals, one column per sweep."""
    series = solver_series(paths)
    size = max(len(linears) for _, linears, _ in series)
    body = [[str(i), series[0][1][i]["shape"]] + [num(s[1][i]["solve_seconds"]) if i < len(s[1]) else ""
                                                  for s in series] for i in range(size)]
    body.append(["", "**layer total, solve s**"] + [f"**{num(t['solve_seconds'])}**" for _, _, t in series])
    body.append(["", "layer total, matmul floor s"] + [num(t.get("matmul_floor_seconds")) for _, _, t in series])
    body.append(["", "commit"] + [str(t.get("git", "")) for _, _, t in series])
    return table_lines(["linear", "shape (out×in)", *(label for label, _, _ in series)], body)


def render_quant_layer(paths: list[Path]) -> Lines:
    """``bench_quant_layer.py``: relative output error per method and setting, one grid per shape."""
    records = records_of(paths)
    lines: Lines = []
    for shape in dict.fromkeys("×".join(map(str, r["shape"])) for r in records):
        mine = [r for r in records if "×".join(map(str, r["shape"])) == shape]
        lines += ["", f"**{shape}: relative output error ‖ΔW X‖/‖W X‖ (seconds)**", ""]
        lines += pivot(mine, lambda r: r["method"], lambda r: f"{r['task']} {r['setting']}",
                       lambda r: f"{r['rel_error']:.4f} ({r['seconds']:.2f} s)")
    return lines[1:]


# ---------------------------------------------------------------- structured pruning


def params_cell(record: Record) -> str:
    """Parameters kept (attention + MLP) / removed share."""
    acc = record.get("accounting") or {}
    return f"{acc.get('params_after', 0):,} ({100 * record['achieved_sparsity']:.2f} % removed)"


def render_struct_grid(paths: list[Path]) -> Lines:
    """Structured pruning grid: perplexity, time and the parameters kept."""
    evaluated = by_ratio([r for r in rows([str(p) for p in paths]) if r.get("ppl")])
    return ["**Perplexity (wiki test, lower is better)**", "", *grid(evaluated, ppl_cell), "",
            "**Parameters kept (share of attention + MLP parameters removed)**", "", *grid(evaluated, params_cell),
            "", "**Prune seconds / peak RSS MiB**", "", *grid(evaluated, time_cell)]


def render_struct_seeds(paths: list[Path]) -> Lines:
    """Other calibration seeds: one row per run."""
    header = ["run", "calibration seed", "ppl", "removed", "params kept", "prune s"]
    body = [[r["run"], str(r["protocol"]["calibration"]["seed"]), num(first_value(r["ppl"]), 3),
             f"{100 * r['achieved_sparsity']:.2f} %", f"{r['accounting']['params_after']:,}",
             num(r["prune_seconds"], 1)] for r in records_of(paths)]
    return table_lines(header, body)


SPEED_ROWS = [("parameters", "params", 0), ("checkpoint bytes (safetensors)", "checkpoint_bytes", 0),
              ("wiki ppl (40 windows)", "ppl", 5), ("prefill ms (64-token prompt)", "prefill_ms", 0),
              ("greedy decode tokens/s", "generate_tokens_per_s", 2)]


def render_structured_speed(paths: list[Path]) -> Lines:
    """``bench_structured_speed.py``: dense vs pruned vs reloaded, one table per file."""
    lines: Lines = []
    for path in paths:
        data = read_records(path)[0]
        dense, pruned = data["dense"], data["pruned"]
        body = [[label, f"{dense[key]:,.{digits}f}", f"{pruned[key]:,.{digits}f}", f"×{pruned[key] / dense[key]:.3f}"]
                for label, key, digits in SPEED_ROWS]
        body.append(["wiki ppl after reload", "", num(data["reloaded_ppl"], 5), ""])
        body.append(["prune seconds", "", num(data["prune_seconds"], 1), ""])
        options = ", ".join(f"{k}={v}" for k, v in data["options"].items()) or "per-layer form"
        title = (f"**`{path.name}`**: {data['method']} {data['sparsity']} --unit {data['unit']} ({options}), "
                 f"{data['threads']} thread(s), {100 * data['projection_params_removed']:.2f} % of the projection "
                 f"parameters removed")
        lines += ["", title, "", *table_lines(["", "dense", "pruned", "pruned / dense"], body)]
    return lines[1:]


def render_decode_ab(paths: list[Path]) -> Lines:
    """``bench_decode_ab.py``: dense and pruned decoding in alternation."""
    lines: Lines = []
    for path in paths:
        d = read_records(path)[0]
        rounds = ", ".join(f"{x:.2f}" for x in d["decode_speedup_per_round"])
        body = [["parameters", f"{d['params']['dense']:,}", f"{d['params']['pruned']:,}"],
                ["greedy decode tokens/s per round", ", ".join(f"{x:.2f}" for x in d["tokens_per_s"]["dense"]),
                 ", ".join(f"{x:.2f}" for x in d["tokens_per_s"]["pruned"])],
                ["median tokens/s", num(d["median_tokens_per_s"]["dense"]), num(d["median_tokens_per_s"]["pruned"])],
                ["per-round speed-up (pruned / dense)", "", rounds],
                ["**median decode speed-up**", "", f"**×{d['decode_speedup_median']:.2f}**"],
                ["median prefill speed-up", "", f"×{d['prefill_speedup_median']:.2f}"]]
        lines += ["", f"**`{path.name}`**: {d['rounds']} rounds, {d['prompt_tokens']}-token prompt, "
                  f"{d['new_tokens']} new tokens, batch {d['batch']}, {d['threads']} thread(s)", ""]
        lines += table_lines(["", "dense", "pruned"], body)
    return lines[1:]


# ---------------------------------------------------------------- zero-shot, distributed, memory, app


def render_zeroshot(paths: list[Path]) -> Lines:
    """``benchmarks/table_zeroshot.py``'s table of the ``prune --tasks`` result files."""
    results = load_zeroshot([str(p) for p in paths])
    if not results:
        return ["(none of these files has a `zero_shot` section)"]
    shot = results[0]["zero_shot"]
    head = f"Examples per task: {shot.get('limit') or 'all'}; 0 shots; {results[0]['model']}."
    prune = ", ".join(f"{r['method']} {r['prune_seconds']:.0f} s" for r in results)
    return [head, "", *zeroshot_table(results), "", f"Prune seconds (one thread, machine shared): {prune}."]


def render_distributed(paths: list[Path]) -> Lines:
    """``bench_distributed.py``: the bf16-forward record and the one-process vs two-rank records."""
    lines: Lines = []
    for r in records_of(paths):
        if r["benchmark"] == "forward_dtype":
            body = [["perplexity", num(r["ppl_fp32"], 3), f"{r['ppl_bf16']:.3f} ({100 * r['ppl_rel_change']:+.2f} %)"],
                    ["prune seconds", num(r["prune_seconds_fp32"], 0), num(r["prune_seconds_bf16"], 0)]]
            lines += ["", f"**{r['run']}, {r['model']}, {r.get('note', '')}**", ""]
            lines += table_lines(["", "fp32 forward", "bf16 forward"], body)
            continue
        body = [["devices", r["devices_one"], r["devices_two"]],
                ["keep-masks identical", "", f"{num(r['masks_identical'])} ({r['mask_entries_differing']:,} "
                 f"entries of {r['linears']} linears differ)"],
                ["perplexity", repr(r["ppl_one"]), f"{r['ppl_two']!r} (difference {r['ppl_abs_diff']:.4g})"],
                ["prune seconds / whole command", f"{r['prune_seconds_one']:.0f} / {r['wall_seconds_one']:.0f}",
                 f"{r['prune_seconds_two']:.0f} / {r['wall_seconds_two']:.0f}"]]
        threads = f"--threads {r['threads']}" if r.get("threads") else "default threads"
        lines += ["", f"**{r['run']}, {r['model']}, {threads}, {r.get('note', '')}**", ""]
        lines += table_lines(["", "1 process", "torchrun, 2 ranks"], body)
    return lines[1:]


def render_eval_memory(paths: list[Path]) -> Lines:
    """``bench_eval_memory.py``: full-vocabulary logits (before) vs the chunked head (after)."""
    lines: Lines = []
    for d in records_of(paths):
        keys = [("perplexity", "ppl", 4), ("seconds", "seconds", 1), ("RSS with the model loaded, MiB",
                "rss_loaded_mb", 0), ("peak RSS, MiB", "peak_rss_mb", 0), ("peak above the loaded model, MiB",
                "eval_extra_mb", 0)]
        body = [[label, num(d["before"][k], digits), num(d["after"][k], digits)] for label, k, digits in keys]
        lines += [f"{d['model']}, seqlen {d['seqlen']}, {d['windows']} windows; relative perplexity difference "
                  f"{d['ppl_rel_diff']:g}.", ""]
        lines += table_lines(["", "full-vocabulary logits", "chunked head"], body)
    return lines


def render_app_load(paths: list[Path]) -> Lines:
    """``bench_app_load.py``: page loads while runs queue."""
    lines: Lines = []
    for d in records_of(paths):
        idle, busy = d["page_load_idle_s"], d["page_load_s"]
        body = [["sessions / submitted by", f"{d['sessions']} / {d['submit']}"],
                ["runs", f"{d['method']} on {d['model']}, nsamples {d['nsamples']}"],
                ["idle page loads, s", ", ".join(f"{x:.2f}" for x in idle)
                 + f" (median {statistics.median(idle):.2f})"],
                ["page loads while runs queue, s", ", ".join(f"{x:.2f}" for x in busy)
                 + f" (median {d['page_load_median_s']:.2f})"],
                ["server's part (HTML), s", ", ".join(f"{x:.2f}" for x in d["document_s"])],
                ["queue positions seen", ", ".join(map(str, d["positions_seen"]))],
                ["all finished", f"{num(d['all_finished'])}; store: {d['store_finished']} finished of "
                 f"{d['store_runs']} runs"]]
        lines += table_lines(["", "measured"], body)
    return lines


def render_lesson(paths: list[Path]) -> Lines:
    """``bench_lesson``: the Lesson with its four runs in the store."""
    records = records_of(paths)
    body = [[str(i + 1), num(r["seconds"]), r["status"], ", ".join(r["reused"])] for i, r in enumerate(records)]
    return table_lines(["#", "seconds", "status line", "runs reused"], body)


def render_dashboard(paths: list[Path]) -> Lines:
    """``dashboard_screens.py``: seconds after the click, and the runs it made."""
    lines: Lines = []
    for d in records_of(paths):
        phases = [[f"`{text.splitlines()[-1].strip()}`", num(s)] for s, text in d["phases_until_first_cell"]]
        phases += [["run started", num(d["click_to_run_started_s"])],
                   ["first heat-map cell", num(d["click_to_first_heatmap_cell_s"], 1)],
                   ["finished", num(d["click_to_finished_s"], 1)]]
        lines += [f"{d['model']}, {d['method']}; protocol: {d['protocol']}; dense perplexity "
                  f"{d['dense_perplexity']}.", "", *table_lines(["what the page showed", "s after the click"], phases)]
        body = [[r["method"], f"{r['nsamples']} × {r['seqlen']}", str(r["eval_windows"]), num(first_value(r["ppl"])),
                 num(first_value(r["dense_ppl"])), ", ".join(r["dense_ppl_cached"]) or "no",
                 num(r["prune_seconds"], 1)] for r in d["runs"]]
        runs_header = ["run", "calibration", "eval windows", "ppl", "dense ppl", "dense cached", "prune s"]
        lines += ["", *table_lines(runs_header, body)]
    return lines


# ---------------------------------------------------------------- weight digests


DIGEST_PAIRS = [("digest_before_contract.jsonl", "digest_after_contract.jsonl"),
                ("digest_tiny_73a8ec3.jsonl", "digest_tiny_head.jsonl"),
                ("digest_tiny_head.jsonl", "digest_tiny_585e6f5.jsonl"),
                ("digest_tiny_awp_before.jsonl", "digest_tiny_awp.jsonl"),
                ("digest_tiny_gptq_before.jsonl", "digest_tiny_gptq.jsonl"),
                ("digest_tiny_house_before.jsonl", "digest_tiny_house_after.jsonl"),
                ("digest_house_before.jsonl", "digest_house_after.jsonl"),
                ("digest_after_contract.jsonl", "digest_house_ten.jsonl"),
                ("digest_tiny_house_after.jsonl", "digest_tiny_scale.jsonl"),
                ("digest_tiny_engine_before.jsonl", "digest_tiny_engine_after.jsonl"),
                ("digest_tiny_engine_after.jsonl", "digest_tiny_select_after.jsonl")]


def abs_sum_gap(before: Record, after: Record) -> float:
    """The largest relative gap between per-linear sums of |w| (0 when the sums agree)."""
    gaps = [abs(after["abs_sums"].get(k, 0.0) - v) / max(abs(v), 1e-30) for k, v in before["abs_sums"].items()]
    return max(gaps, default=0.0)


def digest_rows(before: list[Record], after: list[Record]) -> list[tuple[Record, Record]]:
    """``(before, after)`` record pairs of the runs present in both digests, in the after file's order."""
    old = {r["run"]: r for r in before}
    return [(old[new["run"]], new) for new in after if new["run"] in old]


def digest_table(pairs: list[tuple[Record, Record]]) -> Lines:
    """One row per run: commits, SHA-256 prefixes, identical yes / no, and the Σ abs(w) gap when not."""
    body = []
    for ref, new in pairs:
        same = ref["weights_sha256"] == new["weights_sha256"]
        body.append([new["run"], f"{ref.get('git', '')} `{ref['weights_sha256'][:12]}`",
                     f"{new.get('git', '')} `{new['weights_sha256'][:12]}`", num(same),
                     "" if same else f"{abs_sum_gap(ref, new):.2e}"])
    return table_lines(["run", "before: commit, SHA-256", "after: commit, SHA-256", "identical",
                        "largest relative gap of per-linear Σ abs(w)"], body)


def render_digests(paths: list[Path]) -> Lines:
    """Before / after comparisons of the weight digests for every pair whose two files exist."""
    present = {p.name: p for p in paths}
    lines: Lines = []
    for first, second in DIGEST_PAIRS:
        if first not in present or second not in present:
            continue
        before, after = read_records(present[first]), read_records(present[second])
        pairs = digest_rows(before, after)
        same = sum(ref["weights_sha256"] == new["weights_sha256"] for ref, new in pairs)
        model = after[0].get("model") if after else None
        lines += ["", f"**`{first}` → `{second}`** (model: {model or 'not recorded in the files'}): identical: "
                  f"{'yes' if pairs and same == len(pairs) else 'no'} ({same} of {len(pairs)} runs)", ""]
        lines += digest_table(pairs)
    paired = {name for pair in DIGEST_PAIRS for name in pair}
    for name in sorted(set(present) - paired):
        lines += ["", f"**`{name}`** (no before/after partner)", "", *generic_table(read_records(present[name]))]
    return lines[1:]


# ---------------------------------------------------------------- anything else


def generic_table(records: list[Record], limit: int = 9) -> Lines:
    """A compact table of the records' scalar fields (at most ``limit`` columns, long texts left out)."""
    keys: list[str] = []
    for record in records:
        keys += [k for k, v in record.items() if isinstance(v, (str, int, float, bool)) and k not in keys
                 and len(str(v)) <= 60]
    keys = keys[:limit]
    body = [[num(r.get(k), 4) if isinstance(r.get(k), float) else num(r.get(k)) for k in keys] for r in records]
    return table_lines(keys, body)


def render_generic(paths: list[Path]) -> Lines:
    """Files no section claims: a generic table each."""
    lines: Lines = []
    for path in paths:
        lines += ["", f"**`{path.name}`**", "", *generic_table(read_records(path))]
    return lines[1:]
