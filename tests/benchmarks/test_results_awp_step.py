"""The AWP step-size table: each run's options name one column, other combinations none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.results_awp_step import _variant, render_steps


@pytest.mark.parametrize(("options", "expected"), [
    ({}, "paper"),
    ({"step": "paper"}, "paper"),
    ({"step": "spectral"}, "spectral"),
    ({"grid_update": "nearest"}, "nearest"),
    ({"stop": "gradient"}, "gradient"),
    ({"stop": "gradient", "grid_update": "nearest"}, "gradient+nearest"),
    ({"stop": "gradient", "keep_best": "true"}, "gradient+best"),
    ({"stop": "gradient", "step": "spectral"}, None),
    ({"step": "jacobi"}, None),
])
def test_each_option_set_names_its_column(options: dict[str, str], expected: str | None) -> None:
    assert _variant({"options": options}) == expected


def test_a_grid_update_run_fills_its_own_cell_and_not_the_papers(tmp_path: Path) -> None:
    protocol = {"evaluation": {"all_windows": True}}
    records = [
        {"benchmark": "prune", "method": "awp", "sparsity": "int3:g128", "options": {}, "ppl": {"wiki": 73.24},
         "prune_seconds": 359, "protocol": protocol, "versions": {"git": "aaaaaaa"}},
        {"benchmark": "prune", "method": "awp", "sparsity": "int3:g128",
         "options": {"stop": "gradient", "grid_update": "nearest"}, "ppl": {"wiki": 62.92}, "prune_seconds": 677,
         "protocol": protocol, "versions": {"git": "bbbbbbb"}},
    ]
    path = tmp_path / "awp_step_cpu.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    table = "\n".join(render_steps([path]))
    row = next(line for line in table.splitlines() if line.startswith("| int3:g128"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[6] == "73.24 (359 s)"  # AWP step=paper
    assert cells[-1] == "62.92 (677 s)"  # stop=gradient, grid_update=nearest
    assert cells[9] == "not measured"  # grid_update=nearest alone
