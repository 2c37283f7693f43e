"""The "served by llama.cpp" section of ``docs/results.md``: PruneLab's GGUF exports measured by llama.cpp.

Read from ``benchmarks/results/llamacpp_*.jsonl`` (records of ``benchmarks/bench_llamacpp.py``, one GGUF
each; per model and label the newest record). One table per model: the dense export (F16; BF16 for a
bfloat16 model), every exported run and llama.cpp's own quantizer on the same dense export, with the
GGUF's size, llama.cpp's perplexity beside PruneLab's on the same windows, batch-1 prefill and decode
tokens/s against the dense export, the solve time, and whether the output is on the served frontier: the
Pareto front of llama.cpp's perplexity against its decode speed relative to the dense export, and against
the GGUF's bytes (:func:`toolkit.figures.frontier.pareto_front`, the rule of the frontier section). The
sentences under each table are computed from the records: the fronts, the largest gap between llama.cpp's
perplexity and PruneLab's, and the best four-bit output of each source. The figure of each model,
``docs/frontier_llamacpp_<model>.png``, is :func:`toolkit.figures.frontier.frontier_figure` of those points.

    python -m benchmarks.results_llamacpp      # (re)draw the figures from the records
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from benchmarks.results_frontier import verdict
from benchmarks.results_read import RESULTS, ROOT, Lines, Section, commits, records_of, rel, table_lines
from toolkit.figures.frontier import FrontierPoint, pareto_front, smaller, speed_of

HEADER = ["output", "GGUF tensors", "MiB", "llama.cpp ppl", "PruneLab ppl (gap)", "prefill tok/s (× dense)",
          "decode tok/s (× dense)", "solve s", "front: ppl–speed", "front: ppl–size"]
KIND_ORDER = {"dense": 0, "prunelab": 1, "llama-quantize": 2}
GROUPS = {"dense": "dense", "prunelab": "PruneLab export", "llama-quantize": "llama-quantize"}
FILES = "llamacpp_*.jsonl"
TITLE = "served by llama.cpp: perplexity vs decode speed (marker area ∝ GGUF bytes)"


def _newest(paths: list[Path]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per model, per label, the last record (files in order, lines in order); the dense row is the first
    measurement of the model, the baseline of the exported runs' ratios."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for record in records_of(paths):
        if record.get("benchmark") == "llamacpp":
            labels = out.setdefault(str(record["model"]), {})
            if record.get("kind") != "dense" or str(record["label"]) not in labels:
                labels[str(record["label"])] = record
    return out


def _types(record: dict[str, Any]) -> str:
    types = record.get("gguf_types") or {}
    if not types:
        return str(record.get("ftype", "")).upper() + " (llama.cpp's mix)"
    return ", ".join(f"{n} {k}" for k, n in sorted(types.items(), key=lambda item: -item[1]))


def served_point(record: dict[str, Any]) -> FrontierPoint:
    """A llama.cpp record as a frontier point: its perplexity and decode ratio in llama.cpp, the GGUF's bytes."""
    solve = record.get("solve_seconds")
    return FrontierPoint(label=str(record["label"]), ppl=float(record["ppl_llamacpp"]),
                         speed=float(record["decode_speedup"]), bytes=round(float(record["gguf_mib"]) * 2**20),
                         group=GROUPS.get(str(record["kind"]), str(record["kind"])),
                         note=f"{_types(record)}" + ("" if solve is None else f"<br>solve {solve:.0f} s"))


def _flag(on: bool | None) -> str:
    return "–" if on is None else ("yes" if on else "no")


def _row(record: dict[str, Any], on_speed: bool | None, on_size: bool | None) -> list[str]:
    ours, gap = record.get("ppl_prunelab"), record.get("ppl_gap")
    prunelab = "–" if ours is None or gap is None else f"{ours:.2f} ({100 * gap:+.2f} %)"
    solve = record.get("solve_seconds")
    return [record["label"], _types(record), f"{record['gguf_mib']:.1f}", f"{record['ppl_llamacpp']:.2f}", prunelab,
            f"{record['prefill_tps']:.0f} ({record['prefill_speedup']:.2f}×)",
            f"{record['decode_tps']:.0f} ({record['decode_speedup']:.2f}×)", "–" if solve is None else f"{solve:.0f}",
            _flag(on_speed), _flag(on_size)]


def _four_bit(record: dict[str, Any]) -> bool:
    label = str(record["label"]).lower()
    return "int4" in label or "q4" in label


def _main_type(record: dict[str, Any]) -> str | None:
    """The block type of a record's linears: its ``ftype`` (llama-quantize) or its most frequent 4-bit type."""
    if record.get("ftype"):
        return str(record["ftype"]).upper()
    four = {k: n for k, n in (record.get("gguf_types") or {}).items() if k.startswith("Q")}
    return max(four, key=four.__getitem__) if four else None


def _same_size(records: list[dict[str, Any]]) -> Lines:
    """Per block type, PruneLab's best export against llama.cpp's quantizer into that type (same bytes)."""
    lines = []
    for qtype in ("Q4_0", "Q4_1"):
        ours = [r for r in records if r["kind"] == "prunelab" and _main_type(r) == qtype]
        theirs = [r for r in records if r["kind"] == "llama-quantize" and _main_type(r) == qtype]
        if ours and theirs:
            best = min(ours, key=lambda r: r["ppl_llamacpp"])
            rivals = "; ".join(f"{r['label']} {r['ppl_llamacpp']:.2f}" for r in theirs)
            lines.append(f"- At {qtype}'s size ({best['gguf_mib']:.1f} MiB): PruneLab's best, {best['label']}, "
                         f"{best['ppl_llamacpp']:.2f}; {rivals}.")
    return lines


def _source_note(model: str, records: list[dict[str, Any]]) -> Lines:
    """Where llama.cpp's quantizer re-finds the grid of the quantized GGUF the embedded model came from."""
    from toolkit.models.embedded import EMBEDDED_MODELS

    source = EMBEDDED_MODELS[model].quantization if model in EMBEDDED_MODELS else None
    hits = [r for r in records if r["kind"] == "llama-quantize" and _main_type(r) == (source or "").upper()]
    if not hits:
        return []
    found = ", ".join(f"{r['label']} {r['ppl_llamacpp']:.2f}" for r in hits)
    return [f"- {model} is itself dequantized from a {source} GGUF: its weights already lie on a {source} grid, "
            f"which llama.cpp's {source} (a float minimum or sub-block scales per block) finds again almost "
            f"exactly ({found} against dense {records[0]['ppl_llamacpp']:.2f}), and PruneLab's grids (an integer "
            "zero point per group) cannot: that row measures the source's own quantization, not a quantizer."]


def _findings(records: list[dict[str, Any]]) -> Lines:
    lines = []
    gaps = [r for r in records if r.get("ppl_gap") is not None]
    if gaps:
        worst = max(gaps, key=lambda r: abs(r["ppl_gap"]))
        lines.append(f"- llama.cpp's perplexity is within {100 * abs(worst['ppl_gap']):.2f} % of PruneLab's own on "
                     f"every output ({len(gaps)} outputs; the largest gap: {worst['label']}).")
    for kind, who in (("prunelab", "PruneLab's"), ("llama-quantize", "llama.cpp's own quantizer's")):
        four = [r for r in records if r["kind"] == kind and _four_bit(r)]
        if four:
            best = min(four, key=lambda r: r["ppl_llamacpp"])
            lines.append(f"- {who} best four-bit output: {best['label']} at {best['ppl_llamacpp']:.2f} "
                         f"({best['gguf_mib']:.1f} MiB, decode {best['decode_speedup']:.2f}× the dense export).")
    return lines


def _ordered(labels: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(labels.values(), key=lambda r: (KIND_ORDER.get(r["kind"], 9), r["ppl_llamacpp"]))


def png_path(model: str) -> Path:
    """Where the served frontier figure of ``model`` is drawn."""
    return ROOT / "docs" / f"frontier_llamacpp_{model}.png"


def render_llamacpp(paths: list[Path]) -> Lines:
    """One table per model, its fronts, findings, commits and figure."""
    by_model = _newest(paths)
    if not by_model:
        return ["No llama.cpp measurement yet."]
    lines: Lines = []
    for model, labels in by_model.items():
        records = _ordered(labels)
        points = [served_point(r) for r in records]
        speed, size = pareto_front(points, speed_of), pareto_front(points, smaller)
        protocol = records[0]["protocol"]
        lines += [f"**{model}**: {protocol['windows']} wiki test windows of {protocol['seqlen']} tokens, "
                  f"{protocol['threads']} thread, batch 1, prompt {protocol['prompt_tokens']} tokens, "
                  f"{protocol['new_tokens']} new tokens, {protocol['repeats']} interleaved rounds (medians); "
                  f"llama-cpp-python {records[0]['versions'].get('llama_cpp_python')}.", ""]
        lines += table_lines(HEADER, [_row(r, a, b) for r, a, b in zip(records, speed, size, strict=True)])
        notes = [*verdict(points), *_findings(records), *_same_size(records), *_source_note(model, records)]
        figure = f"![{model} served by llama.cpp: perplexity against decode speed, marker area ∝ GGUF bytes]" \
                 f"({png_path(model).name})"
        lines += ["", *notes, "", f"Commits: {', '.join(f'`{c}`' for c in commits(records))}.", "", figure, ""]
    return lines[:-1]


def draw_pngs() -> list[Path]:
    """Draw every model's served frontier from the committed records; the paths written."""
    from toolkit.figures.frontier import frontier_figure
    from toolkit.figures.paper import png_bytes

    written = []
    for model, labels in _newest(sorted(RESULTS.glob(FILES))).items():
        path = png_path(model)
        figure = frontier_figure([served_point(r) for r in _ordered(labels)], title=f"{model} {TITLE}", height=560)
        path.write_bytes(png_bytes(figure, dpi=150))
        written.append(path)
    return written


LLAMACPP_SECTIONS = (
    Section(
        "Served by llama.cpp: GGUF exports, their perplexity and speed where they run",
        (FILES,),
        render_llamacpp,
        "Every output is a GGUF written by `python -m toolkit export RUN --format gguf` (docs/serving.md): a "
        "quantized run's linears in the block type that holds its grid code for code (asymmetric INT4 g32 → "
        "Q4_1, symmetric → Q4_0), the token embedding F16 (Gemma: BF16; PruneLab does not quantize it), "
        "norms F32. "
        "\"llama-quantize\" rows are llama.cpp's own quantizer (`llama_model_quantize`, what `llama-quantize` "
        "runs) on the same dense export (F16; Gemma: BF16), with the token embedding and output head kept at "
        "F16 so that only the decoder linears differ; \"+ imatrix\" rows quantize with the importance matrix "
        "`llama-imatrix` computed on PruneLab's calibration windows (wiki train 32 × 512, seed 0, decoded and "
        "joined; its seconds are in \"solve s\"), the others without one; they were measured in a second "
        "invocation, so their ratios are to that invocation's own dense export (the dense row shown is the "
        "first invocation's). Runs: calibration wiki "
        "train "
        "32 × 512 tokens, seed 0. llama.cpp built from the sources llama-cpp-python 0.3.36 vendors, on the development "
        "machine's CPU (AMD EPYC with AVX-512), "
        "while another benchmark ran on the second core: the speeds are comparable within a table (interleaved "
        "rounds), not across sessions. \"solve s\" is the run's prune time (other work on the machine included) "
        "or the quantizer's. The fronts follow the frontier section's rule on llama.cpp's own figures: an output "
        "is on the perplexity–speed front when no other has both a lower-or-equal perplexity and a higher-or-equal "
        "decode ratio, one of the two strictly (size: the GGUF's bytes); each figure draws them as the frontier "
        "figure does (`python -m benchmarks.results_llamacpp`).",
        """B="python -m toolkit prune --nsamples 32 --seqlen 512 --eval-seqlen 512 --eval-windows 40 --save-model"
$B --model smollm2-135m --method rtn --quant int4:g32        # and int4:g32:sym
$B --model smollm2-135m --method gptq --quant int4:g32       # and int4:g32:sym
$B --model smollm2-135m --method awp --quant int4:g32:sym --set quant_init=gptq --set grid_update=nearest
$B --model smollm2-135m --method awq --quant int4:g32 --set scale=shared   # and int4:g32:sym
$B --model smollm2-135m --method depth --sparsity "structured:4 layers"
$B --model smollm2-135m --method wanda --sparsity 50%
python -m benchmarks.bench_llamacpp --model smollm2-135m --runs runs/<each run above> \\
    --json benchmarks/results/llamacpp_smollm2.jsonl
python -m benchmarks.bench_llamacpp --model smollm2-135m --quantizers "" --llama-bin llama.cpp/build/bin \\
    --json benchmarks/results/llamacpp_smollm2.jsonl          # + imatrix rows (docs/serving.md builds the tools)
$B --model gemma-3-270m --method gptq --quant int4:g32:sym                   # and rtn; awq with --set scale=shared
python -m benchmarks.bench_llamacpp --model gemma-3-270m --runs runs/<each Gemma run> --quantizers q4_0,q4_k_m \\
    --json benchmarks/results/llamacpp_gemma.jsonl
python -m benchmarks.bench_llamacpp --model gemma-3-270m --quantizers "" --imatrix-types q4_0,q4_k_m \\
    --llama-bin llama.cpp/build/bin --json benchmarks/results/llamacpp_gemma.jsonl""",
    ),
)


def main() -> int:
    """Draw ``docs/frontier_llamacpp_<model>.png``; exit 1 when there is no record to draw."""
    written = draw_pngs()
    if not written:
        print(f"no llama.cpp records in {rel(RESULTS)}: run benchmarks/bench_llamacpp.py first")
        return 1
    for path in written:
        print(f"wrote {rel(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
