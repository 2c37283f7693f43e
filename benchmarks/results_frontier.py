"""The "frontier" section of ``docs/results.md`` and its figure ``docs/frontier.png``.

Read from ``benchmarks/results/cpu_frontier.jsonl`` (records of ``benchmarks/bench_frontier.py``, one
output model each; the last record of an entry wins). The table gives each output's perplexity,
size on disk and decode tokens/s at batch 1 and 8 beside the dense source's, and whether it is on
the Pareto front of perplexity against speed and of perplexity against size; the sentences under
it name those outputs, computed from the records
(:func:`toolkit.figures.frontier.pareto_front`). The figure is
:func:`toolkit.figures.frontier.frontier_figure`, the one the app's Sweep tab and
``notebooks/08_frontier.ipynb`` draw.

    python -m benchmarks.results_frontier      # (re)draw docs/frontier.png from the records
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.results_read import RESULTS, ROOT, Lines, Section, records_of, rel, table_lines
from toolkit.figures.frontier import (
    FrontierPoint,
    benchmark_point,
    decode_ratio,
    newest_by_entry,
    pareto_front,
    smaller,
    speed_of,
)

FILE = "cpu_frontier.jsonl"
PNG = ROOT / "docs" / "frontier.png"
BATCHES = (1, 8)
HEADER = ["output", "wiki ppl (× dense)", "size on disk MiB", "decode tok/s batch 1 (× dense)",
          "decode tok/s batch 8 (× dense)", "front: ppl–speed", "front: ppl–size", "runs (commits)"]
Record = Mapping[str, Any]


def _ppl(record: Record, dense_entry: float | None) -> str:
    ppl, dense = record.get("ppl"), record.get("dense_ppl") or dense_entry
    if not isinstance(ppl, int | float):
        return "not measured"
    return f"{ppl:.2f} ({ppl / dense:.2f}×)" if isinstance(dense, int | float) and dense else f"{ppl:.2f}"


def _size(record: Record) -> str:
    on_disk, estimate = record.get("bytes_on_disk"), record.get("bytes_estimated")
    if on_disk is not None:
        return f"{on_disk / 2**20:.1f}"
    why = record.get("not_saved_reason")
    if estimate is not None:
        return f"est. {estimate / 2**20:.1f} MiB" + (f", not savable: {why}" if why else "")
    return "not measured" + (f" ({why})" if why else "")


def _decode(record: Record, batch: int) -> str:
    rate = ((record.get("speed") or {}).get("decode_tokens_per_s") or {}).get(str(batch))
    ratio = decode_ratio(record, batch)
    if rate is None:
        return "not measured"
    return f"{rate:.1f} ({ratio:.2f}×)" if ratio is not None else f"{rate:.1f}"


def _flag(on: bool | None) -> str:
    return "–" if on is None else ("yes" if on else "no")


def _runs(record: Record) -> str:
    chain = record.get("chain") or []
    if not chain:
        return f"dense source (`{(record.get('versions') or {}).get('git', '?')}`)"
    return " → ".join(f"{step.get('method')} `{step.get('run')}` (`{step.get('git')}`)" for step in chain)


def _named(points: Sequence[FrontierPoint], flags: Sequence[bool | None], wanted: bool | None) -> str:
    names = [p.label for p, flag in zip(points, flags, strict=True) if flag is wanted]
    return ", ".join(names) if names else "none"


def verdict(points: Sequence[FrontierPoint]) -> Lines:
    """The sentences that say which outputs are on each front (computed, never written by hand)."""
    speed, size = pareto_front(points, speed_of), pareto_front(points, smaller)
    lines = [f"- On the perplexity–speed front (decode tokens/s at batch 1 relative to dense): "
             f"**{_named(points, speed, True)}**. Behind it: {_named(points, speed, False)}.",
             f"- On the perplexity–size front (bytes on disk as saved): **{_named(points, size, True)}**. "
             f"Behind it: {_named(points, size, False)}."]
    behind = [p.label for p, a, b in zip(points, speed, size, strict=True) if a is False and b is False]
    if behind:
        lines.append(f"- On neither front: {', '.join(behind)}.")
    unmeasured = [p.label for p, flag in zip(points, speed, strict=True) if flag is None]
    if unmeasured:
        lines.append(f"- No measured speed, so not on the speed front: {', '.join(unmeasured)}.")
    unsaved = [p.label for p, flag in zip(points, size, strict=True) if flag is None]
    if unsaved:
        lines.append(f"- No size on disk (not saved), so not on the size front: {', '.join(unsaved)}.")
    return lines


def _speed_protocol(records: Sequence[Record]) -> str:
    timed = [r["speed"] for r in records if r.get("speed")]
    if not timed:
        return "No output has a measured speed."
    settings = sorted({f"{s.get('device')}, {s.get('threads')} thread(s), batches "
                       f"{', '.join(str(b) for b in s.get('batches') or [])}" for s in timed})
    loads = [value for r in records for value in (r.get("load_average") or [])]
    load = f" Load average on the host during the measurements: {min(loads):.1f} to {max(loads):.1f}." if loads else ""
    return f"Speed measured on {'; '.join(settings)}.{load}"


def _spread(records: Sequence[Record]) -> Lines:
    """The measurement's own spread: the ratios of outputs that compute the dense model's products."""
    dense_params = next((r.get("params") for r in records if r.get("family") == "dense"), None)
    same = [ratio for r in records if r.get("family") != "dense" and r.get("params") == dense_params
            for ratio in (decode_ratio(r, b) for b in BATCHES) if ratio is not None]
    if not same or dense_params is None:
        return []
    return [f"Outputs with the dense model's shapes (INT4 dequantized on load: the same products) measured "
            f"{min(same):.2f}× to {max(same):.2f}×: a difference in speed ratio smaller than that spread is "
            "the measurement's noise, not the compression's."]


def render_frontier(paths: list[Path]) -> Lines:
    """The table, the verdict on the fronts, the speed protocol and the figure's link."""
    records = newest_by_entry(records_of(paths))
    if not records:
        return ["No frontier measurement yet: run `benchmarks/bench_frontier.py` (its docstring gives the command)."]
    points = [benchmark_point(r) for r in records]
    speed, size = pareto_front(points, speed_of), pareto_front(points, smaller)
    dense = next((r.get("ppl") for r in records if r.get("family") == "dense"), None)
    rows = [[f"{r.get('entry')}", _ppl(r, dense), _size(r), _decode(r, 1), _decode(r, 8), _flag(a), _flag(b), _runs(r)]
            for r, a, b in zip(records, speed, size, strict=True)]
    figure = f"![perplexity against decode speed relative to dense, marker area ∝ bytes]({PNG.name})"
    return [*table_lines(HEADER, rows), "", *verdict(points), "", _speed_protocol(records), *_spread(records), "",
            "INT4 checkpoints are stored pack-quantized (compressed-tensors) and dequantized to float32 when "
            "plain transformers loads them on a CPU: they are smaller on disk, not faster here. Exported to GGUF and "
            "served by llama.cpp, where 4-bit blocks are the fast path, they decode faster too: the section "
            "*Served by llama.cpp* gives that frontier, measured by llama.cpp, with its figures. A recovery is "
            "`python -m toolkit recover RUN --loss kd|lm` with its defaults (40 steps of a LoRA, about 512 "
            "tokens a step, drawn from the calibration text: the wiki train split, the domain of the test "
            "split the perplexity is measured on). `benchmarks/frontier.sh` lists every command.", "",
            "An output is on a front when no other output has both a lower-or-equal perplexity and a higher-or-equal "
            "speed (or a smaller-or-equal size on disk), one of the two strictly. The figure (drawn by "
            "`python -m benchmarks.results_frontier` with `toolkit/figures/frontier.py`, the app's Sweep tab and "
            "`notebooks/08_frontier.ipynb` draw the same) puts perplexity against decode speed at batch 1, marker "
            "area ∝ bytes on disk (hollow: estimated, not saved), the front as a dashed step line; outputs without "
            "a measured speed are named under it.", "", figure]


def draw_png(path: Path = PNG) -> Path | None:
    """Draw the figure of the committed records to ``path``; None (nothing written) when there are none."""
    from toolkit.figures.frontier import frontier_figure
    from toolkit.figures.paper import png_bytes

    source = RESULTS / FILE
    records = newest_by_entry(records_of([source])) if source.exists() else []
    if not records:
        return None
    figure = frontier_figure([benchmark_point(r) for r in records], height=560)
    path.write_bytes(png_bytes(figure, dpi=150))
    return path


FRONTIER_SECTIONS = (
    Section(
        "The frontier: perplexity, size on disk and decode speed of each output (all 210 windows)",
        (FILE,),
        render_frontier,
        "`smollm2-135m` on the CPU protocol (evaluation wiki test, seqlen 512, all windows; the records' own "
        "protocols are listed below). Each output is the last run of a chain of CLI runs from the dense source "
        "(prune, quantize, or recover by distillation, `kd`, or on the language-model loss, `lm`), which "
        "`benchmarks/bench_frontier.py` follows back; its size is the safetensors files as saved, and its speed is "
        "measured as `python -m toolkit measure` does ([measure.md](measure.md)): the saved model and the dense "
        "source loaded in one process, their passes interleaved, so the ratio to dense holds on the busy 2-core "
        "host where the absolute tokens/s do not. Where several records name one output, the last one.",
        """OMP_NUM_THREADS=1 python -m benchmarks.bench_frontier --dense smollm2-135m \\
  --json benchmarks/results/cpu_frontier.jsonl
OMP_NUM_THREADS=1 python -m benchmarks.bench_frontier RUN --entry "numerical 20% + KD" --family width \\
  --json benchmarks/results/cpu_frontier.jsonl     # one line per output: RUN the chain's last run
python -m benchmarks.results_frontier   # docs/frontier.png""",
    ),
)


def main() -> int:
    """Draw ``docs/frontier.png``; exit 1 when there is no record to draw."""
    written = draw_png()
    if written is None:
        print(f"no frontier records in {rel(RESULTS / FILE)}: run benchmarks/bench_frontier.py first")
        return 1
    print(f"wrote {rel(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
