"""Write docs/bad_input.md: every case of the bad-input catalogue, its command and what the user sees.

Runs each case of :data:`tests.helpers.bad_inputs.CASES` (the same runs as
``tests/cli/test_bad_input_catalogue.py``, slow ones included) and writes one table row per case;
the test fails while a case's row on the page differs from what the command prints.

Usage: ``python -m benchmarks.bad_input_doc [--out docs/bad_input.md]``
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from tests.helpers.bad_inputs import CASES, BadInput, run_case, seen_line

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "bad_input.md"
HEADER = """# Bad input: what the user sees

Each row is one case of the catalogue in `tests/helpers/bad_inputs.py`, run by
`tests/cli/test_bad_input_catalogue.py` (which fails when a case has no row here, or its row lacks
the words the case checks for). A refused input is one line on stderr starting with `error:` and exit code 2, before any
model loads; `runs` over a store with a damaged run lists every run and gives the damaged one a
`damaged: <why>` row (exit code 0). `{tmp}` is a scratch folder; run ids read `RUN`, and runs of
spaces are shown as one. Regenerate with `python -m benchmarks.bad_input_doc`.

| case | command | exit | what the user sees |
|---|---|---|---|
"""


def cell(text: str) -> str:
    """``text`` as a markdown code span in a table cell (pipes escaped, backticks fenced)."""
    text = text.replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def row(case: BadInput, code: int, line: str) -> str:
    """One table row: the case in words, the command, the exit code, the line seen."""
    command = " ".join(["python -m toolkit", *case.argv])
    return f"| {case.what} | {cell(command)} | {code} | {cell(line)} |"


BENCH = ROOT / "benchmarks" / "results" / "store_hostile_cpu.jsonl"
BENCH_HEADER = """
## `runs` over a hostile store

`python -m benchmarks.bench_store --json benchmarks/results/store_hostile_cpu.jsonl` builds a store of
good finished runs beside a `status.json` nested 200,000 levels deep, a `status.json` that is a named
pipe and two runs with escape sequences (folder name, config values), then lists it: in-process
(`main(["runs", ...])` after one warm-up listing; each repeat) and as a fresh `python -m toolkit runs`
process, whose time is mostly its start and imports (the same process over an empty store beside it).

"""
COLUMNS = ("good runs", "rows", "damaged", "good listed", "raw control characters", "listing s (in-process)",
           "fresh process s", "fresh process, empty store s", "load average (1 min)", "cores")


def bench_rows(path: Path = BENCH) -> list[str]:
    """One row per record of ``benchmarks/results/store_hostile_cpu.jsonl`` (none when it is absent)."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        listing = ", ".join(f"{s:.3f}" for s in r["listing_s"])
        cells = (r["good"], r["rows"], r["damaged"], r["good_listed"], r["raw_control_characters"], listing,
                 r["process_s"], r["process_empty_store_s"], f"{r['machine']['load_average_1min_at_start']:.1f}",
                 r["machine"]["cores"])
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    head = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return head + rows if rows else []


def main() -> None:
    """Run every case and write the page."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", default=str(PAGE), help="the page to write")
    args = parser.parse_args()
    rows = []
    for case in CASES:
        with tempfile.TemporaryDirectory(prefix="prunelab-bad-input-") as folder:
            outcome = run_case(case, Path(folder))
        rows.append(row(case, outcome.code, seen_line(case, outcome)))
        print(rows[-1], flush=True)
    measured = bench_rows()
    tail = BENCH_HEADER + "\n".join(measured) + "\n" if measured else ""
    Path(args.out).write_text(HEADER + "\n".join(rows) + "\n" + tail, encoding="utf-8")


if __name__ == "__main__":
    main()
