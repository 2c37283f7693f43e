"""Write docs/bad_input.md: every case of the bad-input catalogue, its command and what the user sees.

Runs each case of :data:`tests.helpers.bad_inputs.CASES` (the same runs as
``tests/cli/test_bad_input_catalogue.py``, slow ones included) and writes one table row per case;
the test fails while a case's row on the page differs from what the command prints.

Usage: ``python -m benchmarks.bad_input_doc [--out docs/bad_input.md]``
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tests.helpers.bad_inputs import CASES, BadInput, run_case, seen_line

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "bad_input.md"
HEADER = """# Bad input: what the user sees

Each row is one case of the catalogue in `tests/helpers/bad_inputs.py`, run by
`tests/cli/test_bad_input_catalogue.py` (which fails when a row here differs from what the command
prints). A refused input is one line on stderr starting with `error:` and exit code 2, before any
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
    Path(args.out).write_text(HEADER + "\n".join(rows) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
