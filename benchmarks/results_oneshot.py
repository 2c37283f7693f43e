"""The one-shot frontier of ``docs/results.md``: every linear-scope pruning method of the CPU protocol at 50, 60
and 70 %, 2:4 and 4:8, without and with ``--permute``; perplexity, prune seconds, the mean relative layer output
error and the commit of each cell, then which method wins each column and by how much, and where ``--permute``
helps. Cells come from the newest run of a run name; a cell no record fills says "not measured"."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from benchmarks.results_permute import NM_PATTERNS, _commit
from benchmarks.results_read import (
    RESULTS,
    Lines,
    Record,
    Section,
    first_value,
    newest_by_run,
    records_of,
    table_lines,
)

METHODS = ("magnitude", "wanda", "ria", "sparsegpt", "thanos", "fista", "alps", "awp")  # the linear-scope pruners
BASELINE = "sparsegpt"
PERM = "+perm"
COLUMNS = ("50%", "60%", "70%", "2:4", "2:4" + PERM, "4:8", "4:8" + PERM)
CALIBRATION = {"source": "wiki", "split": "train", "nsamples": 32, "seqlen": 512, "seed": 0}
EVALUATION = {"dataset": "wiki", "split": "test", "seqlen": 512, "all_windows": True}
MISSING = "not measured"

Cell = tuple[str, str]  # (row label, column)


def in_protocol(record: Record) -> bool:
    """A prune record of a linear-scope method on the CPU protocol: calibration wiki train 32 × 512 seed 0,
    every evaluation window of wiki test at seqlen 512, no quantization, no structured unit."""
    proto = record.get("protocol") or {}
    cal, ev = proto.get("calibration") or {}, proto.get("evaluation") or {}
    return (record.get("benchmark") == "prune" and record.get("method") in METHODS
            and not record.get("quant") and not record.get("unit")
            and all(cal.get(k) == v for k, v in CALIBRATION.items())
            and all(ev.get(k) == v for k, v in EVALUATION.items()))


def row_label(record: Record) -> str:
    """The method, with its recorded options (``--permute`` is a column, not an option): ``thanos (alpha=0.1)``."""
    options = ", ".join(f"{k}={v}" for k, v in sorted((record.get("options") or {}).items()) if k != "permute")
    return f"{record['method']} ({options})" if options else str(record["method"])


def column_of(record: Record) -> str | None:
    """The record's column (``2:4+perm`` for a permuted 2:4 run); None for a sparsity outside the table."""
    sparsity = str(record.get("sparsity"))
    column = sparsity + PERM if record.get("permute") and sparsity in NM_PATTERNS else sparsity
    return column if column in COLUMNS else None


def _stamp(record: Record) -> str:
    return Path(str(record.get("run_dir", ""))).name


def select_cells(records: Iterable[Record]) -> dict[Cell, Record]:
    """The newest run of every run name, then per (row, column) the newest of the names that fill it."""
    cells: dict[Cell, Record] = {}
    for record in newest_by_run(r for r in records if in_protocol(r)).values():
        column = column_of(record)
        if column is None:
            continue
        key = (row_label(record), column)
        if key not in cells or _stamp(record) >= _stamp(cells[key]):
            cells[key] = record
    return cells


def rows_of(cells: dict[Cell, Record]) -> list[str]:
    """Every linear-scope method (measured or not), its option variants after it."""
    labels = {label for label, _ in cells}
    return [label for method in METHODS
            for label in sorted(labels | {method}) if label == method or label.startswith(method + " (")]


def ppl_of(cells: dict[Cell, Record], key: Cell) -> float | None:
    """The cell's wiki perplexity (None where not measured)."""
    record = cells.get(key)
    return first_value(record.get("ppl")) if record else None


def _ppl_text(record: Record) -> str:
    value = first_value(record.get("ppl"))
    return MISSING if value is None else f"{value:.2f}"


def _seconds_text(record: Record) -> str:
    seconds = record.get("prune_seconds")
    return "not recorded" if seconds is None else f"{seconds:.0f} s"


def _error_text(record: Record) -> str:
    mean = (record.get("layer_error") or {}).get("mean")
    return "not recorded" if mean is None else f"{mean:.4f}"


def _commit_text(record: Record) -> str:
    return f"`{_commit(record)}`"


def grid(cells: dict[Cell, Record], text: Callable[[Record], str]) -> Lines:
    """One table: a row per method label, a column per target; ``text(record)`` in each measured cell."""
    body = [[label, *(text(cells[label, c]) if (label, c) in cells else MISSING for c in COLUMNS)]
            for label in rows_of(cells)]
    return table_lines(["method", *COLUMNS], body)


def _lower(best: float, other: float) -> str:
    return f"{100 * (other - best) / other:.1f} % lower"


def winner_line(cells: dict[Cell, Record], column: str) -> str:
    """The column's best perplexity, its margin over the second-best and over SparseGPT's cell."""
    ranked = sorted((p, label) for (label, c), r in cells.items()
                    if c == column and (p := first_value(r.get("ppl"))) is not None)
    if not ranked:
        return f"- **{column}**: {MISSING}."
    best, name = ranked[0]
    parts = [f"- **{column}** ({len(ranked)} rows measured): best **{name}** {best:.2f}"]
    if len(ranked) > 1:
        second, other = ranked[1]
        parts.append(f"{_lower(best, second)} than the second-best, {other} {second:.2f}")
    else:
        parts.append("the only one measured")
    reference = ppl_of(cells, (BASELINE, column))
    if name == BASELINE:
        parts.append("SparseGPT itself")
    elif reference is None:
        parts.append(f"SparseGPT {MISSING}")
    elif len(ranked) > 1 and ranked[1][1] != BASELINE:
        parts.append(f"{_lower(best, reference)} than SparseGPT {reference:.2f}")
    return "; ".join(parts) + "."


def permute_line(cells: dict[Cell, Record], pattern: str) -> str:
    """Per method label, the change ``--permute`` makes at ``pattern``: helps, does not help, or no pair."""
    helps, hurts, unpaired = [], [], []
    for label in rows_of(cells):
        plain, permuted = ppl_of(cells, (label, pattern)), ppl_of(cells, (label, pattern + PERM))
        if plain is None or permuted is None:
            unpaired.append(label)
            continue
        change = 100 * (permuted - plain) / plain
        (helps if change < 0 else hurts).append(f"{label} {plain:.2f} → {permuted:.2f} ({change:+.1f} %)")
    either = sorted((p, f"{label}{' with --permute' if c.endswith(PERM) else ''}")
                    for (label, c), r in cells.items() if c.split(PERM)[0] == pattern
                    and (p := first_value(r.get("ppl"))) is not None)
    parts = [f"- **{pattern}**: `--permute` helps: " + ("; ".join(helps) if helps else "none of the measured pairs"),
             "It does not help: " + ("; ".join(hurts) if hurts else "none of the measured pairs")]
    if either:
        parts.append(f"Best {pattern} either way: {either[0][1]} {either[0][0]:.2f}")
    if unpaired:
        parts.append("No pair measured for " + ", ".join(unpaired))
    return ". ".join(parts) + "."


def render_oneshot(paths: list[Path]) -> Lines:
    """The four tables (perplexity, prune seconds, mean layer error, commit) and the generated reading."""
    cells = select_cells(records_of(paths))
    if not cells:
        return ["No one-shot pruning record of the CPU protocol yet."]
    return ["Wiki perplexity (lower is better):", "", *grid(cells, _ppl_text), "",
            "Prune seconds (loose: the 2-core host ran other jobs beside most runs):", "",
            *grid(cells, _seconds_text), "",
            "Mean relative layer output error ‖ΔW X‖/‖W X‖ over the layers (recorded by runs since it was added):",
            "", *grid(cells, _error_text), "",
            "Commit of each cell's run:", "", *grid(cells, _commit_text), "",
            "Best perplexity per column (margins are the perplexity difference relative to the other cell):", "",
            *(winner_line(cells, column) for column in COLUMNS), "",
            "Channel permutation, per method and n:m pattern:", "",
            *(permute_line(cells, pattern) for pattern in NM_PATTERNS)]


CELLS = "cpu_oneshot_cells.jsonl"


def cells_command(path: Path) -> str:
    """The command that measures the run names of ``path`` (one process each, as they were run), in file order."""
    names = list(dict.fromkeys(r["run"] for r in records_of([path]))) if path.exists() else []
    quoted = " \\\n  ".join(" ".join(f'"{n}"' for n in names[i:i + 5]) for i in range(0, len(names), 5))
    return (f"for r in {quoted}; do\n  OMP_NUM_THREADS=1 python -m benchmarks.bench_prune --runs \"$r\" --no-dense "
            f"--json benchmarks/results/{path.name}\ndone\n# the other files: the commands of their own sections above")


ONESHOT_SECTIONS = (
    Section(
        "One-shot frontier: every linear-scope pruning method at 50/60/70 %, 2:4 and 4:8, ± --permute "
        "(all 210 windows)",
        ("cpu_full_baselines.jsonl", "cpu_full_fista_thanos.jsonl", "cpu_full_48.jsonl", "cpu_full_fista_more.jsonl",
         "cpu_awp_full.jsonl", "cpu_ria.jsonl", "cpu_permute.jsonl", CELLS),
        render_oneshot,
        "`smollm2-135m`, CPU protocol: calibration wiki train 32 × 512 tokens, seed 0; evaluation wiki test, "
        "seqlen 512, all windows; no quantization, no structured unit. Only these files' prune records of that "
        "protocol are read; a row is a method with the options its runs recorded (`thanos (alpha=0.1)` is a "
        "row of its own); where a run name was measured more than once, the newest run. `+perm` columns are "
        "the same n:m pattern with `--permute` (docs/methods/ria.md). Every cell no record fills says \"not "
        "measured\"; the mean relative layer output error is \"not recorded\" for runs from before "
        "`bench_prune` recorded it. The second model of this frontier, Gemma-3-270M base, is not measured: "
        "the measuring host has no model download.",
        cells_command(RESULTS / CELLS),
    ),
)
