"""Generate ``docs/results.md`` from the raw measurements in ``benchmarks/results/``.

    python -m benchmarks.results_doc            # (re)write docs/results.md
    python -m benchmarks.results_doc --check    # exit 1 if docs/results.md is not what this would write

Every number on the page is read from a JSON / JSONL file under ``benchmarks/results/``; the prose kept
here is the protocol and the commands, taken from the README. The page's date is the newest run
timestamp found in the files (run ids such as ``20261124-132117-…``), never the day it is generated.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.table import grid, rows, variant
from benchmarks.table_zeroshot import load as load_zeroshot
from benchmarks.table_zeroshot import table as zeroshot_table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "results.md"
COMMAND = "python -m benchmarks.results_doc"
Record = dict[str, Any]
Lines = list[str]
STAMP = re.compile(r"(?<![\d.])(20\d\d)(\d\d)(\d\d)-(\d\d)(\d\d)(\d\d)-")


# ---------------------------------------------------------------- reading


def read_records(path: Path) -> list[Record]:
    """The JSON objects of one file: one per line for ``.jsonl``; the one object of a ``.json``.

    Lines that are not JSON objects (e.g. a server log line before the JSON) are skipped.
    """
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]
    start = 0 if text.lstrip().startswith("{") else text.index("\n{") + 1
    return [json.loads(text[start:])]


def records_of(paths: Iterable[Path]) -> list[Record]:
    """Every record of every file, in order (no de-duplication: repeated timings stay)."""
    return [record for path in paths for record in read_records(path)]


def rel(path: Path) -> str:
    """The path relative to the repository root, as the page cites it."""
    return path.relative_to(ROOT).as_posix()


def stamps(paths: Iterable[Path]) -> list[str]:
    """``YYYY-MM-DD HH:MM`` of every run id found in the files' text, sorted."""
    found = set()
    for path in paths:
        for y, mo, d, h, mi, _ in STAMP.findall(path.read_text(encoding="utf-8")):
            found.add(f"{y}-{mo}-{d} {h}:{mi}")
    return sorted(found)


def commits(records: Iterable[Record]) -> list[str]:
    """The code commits the records name (``versions.git`` or ``git``), first-seen order."""
    seen = [(r.get("versions") or {}).get("git") or r.get("git") for r in records]
    return list(dict.fromkeys(c for c in seen if c))


# ---------------------------------------------------------------- formatting


def num(value: Any, digits: int = 2) -> str:
    """A cell: floats with ``digits`` decimals, ints as they are, None as empty, booleans as yes / no."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def table_lines(header: list[str], body: Iterable[list[str]]) -> Lines:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in body]


def pivot(records: list[Record], row: Callable[[Record], str], column: Callable[[Record], str],
          cell: Callable[[Record], str]) -> Lines:
    """A markdown grid: one row per ``row`` value, one column per ``column`` value (first-seen order)."""
    columns = list(dict.fromkeys(column(r) for r in records))
    names = list(dict.fromkeys(row(r) for r in records))
    found = {(row(r), column(r)): r for r in records}
    body = [[name] + [cell(found[name, c]) if (name, c) in found else "" for c in columns] for name in names]
    return table_lines(["", *columns], body)


def first_value(values: dict | None) -> float | None:
    """The one dataset's value of a ``ppl`` dict (None when empty)."""
    return next(iter(values.values()), None) if values else None


def ppl_cell(record: Record) -> str:
    """Perplexity, two decimals."""
    return num(first_value(record.get("ppl")))


def time_cell(record: Record) -> str:
    """``prune s / peak RSS MiB``, as the README's time grid."""
    return f"{record['prune_seconds']:.0f} s / {record['peak_rss_mb']:.0f}"


def achieved_cell(record: Record) -> str:
    """Achieved sparsity (fraction of zeros over the pruned linears), four decimals."""
    return num(record.get("achieved_sparsity"), 4)


def protocol_text(record: Record) -> str:
    """One record's protocol, from its ``protocol`` field."""
    proto = record.get("protocol") or {}
    cal, ev = proto.get("calibration") or {}, proto.get("evaluation")
    parts = [proto.get("model_label", record.get("model", "")),
             f"calibration {cal.get('source')} {cal.get('split')} {cal.get('nsamples')} × {cal.get('seqlen')}, "
             f"seed {cal.get('seed')}"]
    if ev:
        scope = "all windows" if ev.get("all_windows") else "the first windows only"
        parts.append(f"evaluation {ev['dataset']} {ev['split']}, seqlen {ev['seqlen']}, {ev['windows']} windows "
                     f"({ev['tokens']:,} tokens, {scope})")
    else:
        parts.append("no perplexity evaluation")
    if proto.get("threads"):
        parts.append(f"{proto['threads']} thread(s)")
    dense = first_value(record.get("dense_ppl"))
    if dense is not None:
        parts.append(f"dense perplexity {dense:.2f}")
    return "; ".join(parts)


def protocol_lines(records: list[Record]) -> Lines:
    """The distinct protocols of the records, as the files record them."""
    texts = list(dict.fromkeys(protocol_text(r) for r in records if isinstance(r.get("protocol"), dict)))
    return [f"- {text}" for text in texts]


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
                ("digest_after_contract.jsonl", "digest_house_ten.jsonl")]


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


# ---------------------------------------------------------------- the page


@dataclass(frozen=True)
class Section:
    """One table family: its raw files (globs under ``benchmarks/results/``), prose, commands and renderer."""

    title: str
    patterns: tuple[str, ...]
    render: Callable[[list[Path]], Lines]
    protocol: str
    command: str = ""


SECTIONS = [
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
        "AWP and the quantizers on the embedded model (all 210 windows)",
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
        "AWP and the quantizers on the embedded model (first 40 evaluation windows)",
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
        "Structured pruning on the embedded model (all 210 windows)",
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
        "Structured pruning on the embedded model (first 40 evaluation windows)",
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
        "App: dashboard on the embedded model",
        ("dashboard_smollm2.json",),
        render_dashboard,
        "One measurement on a quiet machine (the 2-core CPU with no other job running): the app's default quick "
        "protocol, Wanda 50 %, the dense perplexity evaluated (`--cold-dense` hides the cached one), then "
        "SparseGPT for Compare. Seconds after the click, as the page recorded them.",
        "python -m benchmarks.dashboard_screens --model smollm2-135m --cold-dense "
        "--out benchmarks/results/dashboard_smollm2.json",
    ),
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
        "contract refactor (which the three runs at `01456b7` reproduced).",
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
