"""How a benchmark hands out its results: one JSON object per line on stdout, appended to a JSON-lines file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def emit(record: dict[str, Any], json_file: str | None) -> None:
    """Print ``record`` as one JSON line, and append it to ``json_file`` when given."""
    line = json.dumps(record)
    print(line, flush=True)
    if json_file:
        Path(json_file).parent.mkdir(parents=True, exist_ok=True)
        with open(json_file, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
