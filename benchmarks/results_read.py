"""Reading ``benchmarks/results/`` and formatting its numbers: the helpers of :mod:`benchmarks.results_doc`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
Record = dict[str, Any]
Lines = list[str]


@dataclass(frozen=True)
class Section:
    """One table family: its raw files (globs under ``benchmarks/results/``), prose, commands and renderer."""

    title: str
    patterns: tuple[str, ...]
    render: Callable[[list[Path]], Lines]
    protocol: str
    command: str = ""


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


def run_stamp(record: Record) -> str:
    """The run folder's name, which starts with the run's timestamp (orders a cell's records by age)."""
    return Path(str(record.get("run_dir", ""))).name


def newest_by_run(records: Iterable[Record]) -> dict[str, Record]:
    """Each ``run`` name's newest record (by its run folder's timestamped name), in first-seen order."""
    found: dict[str, Record] = {}
    for r in records:
        older = found.get(r["run"])
        if older is None or run_stamp(r) >= run_stamp(older):
            found[r["run"]] = r
    return found


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


def first_value(values: dict | float | None) -> float | None:
    """The one dataset's value of a ``ppl`` dict (None when empty); a record's bare number as it is."""
    if isinstance(values, int | float):
        return float(values)
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
    cal, ev = proto.get("calibration"), proto.get("evaluation")
    parts = [proto.get("model_label", record.get("model", ""))]
    if cal:  # a record of the dense source alone has no calibration
        parts.append(f"calibration {cal.get('source')} {cal.get('split')} {cal.get('nsamples')} × "
                     f"{cal.get('seqlen')}, seed {cal.get('seed')}")
    if ev:
        scope = "all windows" if ev.get("all_windows") else "the first windows only"
        size = ", ".join([*([f"{ev['tokens']:,} tokens"] if "tokens" in ev else []),
                          *([scope] if "all_windows" in ev or "tokens" in ev else [])])
        parts.append(f"evaluation {ev['dataset']} {ev['split']}, seqlen {ev['seqlen']}, {ev['windows']} windows"
                     + (f" ({size})" if size else ""))
    else:
        parts.append("no perplexity evaluation")
    if proto.get("threads"):
        parts.append(f"{proto['threads']} thread(s)")
    dense = first_value(record.get("dense_ppl"))
    if dense is not None:
        parts.append(f"dense perplexity {dense:.2f}")
    return "; ".join(part for part in parts if part)


def protocol_lines(records: list[Record]) -> Lines:
    """The distinct protocols of the records, as the files record them."""
    texts = list(dict.fromkeys(protocol_text(r) for r in records if isinstance(r.get("protocol"), dict)))
    return [f"- {text}" for text in texts]
