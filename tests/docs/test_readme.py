"""The README stays a product page: short, its links resolve, and its headline numbers are measured ones."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_is_a_short_product_page() -> None:
    assert len(README.encode()) <= 12 * 1024
    assert "make demo" in README and "make test" in README


def test_readme_links_resolve() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)\)", README)
    missing = [t for t in targets if not t.startswith("http") and not (ROOT / t).exists()]
    assert targets and not missing, missing


def test_headline_numbers_are_in_the_generated_results() -> None:
    """Every perplexity in the methods table appears in docs/results.md (generated from benchmarks/results/)."""
    results = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    table = README[README.index("## Methods"):README.index("## Documentation")]
    numbers = re.findall(r"\b\d+\.\d\d\b", table)
    assert len(numbers) >= 12
    assert not [n for n in numbers if n not in results], "headline numbers not in docs/results.md"


def test_docs_and_code_cite_only_files_in_the_repository() -> None:
    """Every repository path the docs and the code's comments name exists; none names a file outside the repository."""
    texts = [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md"), *(ROOT / "toolkit").rglob("*.py"),
             *(ROOT / "app").rglob("*.py")]
    pattern = re.compile(r"\b(?:toolkit|app|tests|benchmarks|notebooks|assets|docs)/[\w/.-]+\.(?:py|md|ipynb|png)\b")
    missing = sorted({f"{p.relative_to(ROOT)}: {m}" for p in texts
                      for m in pattern.findall(p.read_text(encoding="utf-8")) if not (ROOT / m).exists()})
    assert not missing, missing
    outside = [str(p.relative_to(ROOT)) for p in texts if re.search(r"\b(?:STYLE|DESIGN|LAYOUT)\.md\b", p.read_text())]
    assert not outside, f"cite CONTRIBUTING.md or docs/architecture.md instead: {outside}"
