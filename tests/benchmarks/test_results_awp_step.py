"""The AWP step-size table: each run's options name one column, other combinations none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.results_awp_step import _variant, render_against_gptq, render_steps


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
    ({"quant_init": "gptq", "grid_update": "nearest"}, "gptq+nearest"),
    ({"quant_init": "gptq"}, None),
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
    assert cells[-2] == "62.92 (677 s)"  # stop=gradient, grid_update=nearest
    assert cells[-1] == "not measured"  # quant_init=gptq, grid_update=nearest
    assert cells[9] == "not measured"  # grid_update=nearest alone


def test_against_gptq_takes_each_ratio_within_one_run(tmp_path: Path) -> None:
    def record(name: str, start: str, loss: list[float], **extra: object) -> dict:
        options = {"quant_init": "gptq", "grid_update": "nearest"} if start == "gptq" else {}
        return {"benchmark": "awp_diagnose", "quant": "int3:g128", "name": name, "loss": loss, "options": options,
                "codes_changed": 0.5 if start == "gptq" else 0.0001, "git": "ccccccc", **extra}

    records = [record("q", "rtn", [10.0, 9.0]), record("q", "gptq", [4.0, 3.9], objective_init=0.2, objective_rtn=0.4),
               record("k", "rtn", [8.0, 8.0]), record("k", "gptq", [2.0, 2.0], objective_init=0.1, objective_rtn=0.2)]
    path = tmp_path / "awp_init_cpu.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = {line.split("|")[2].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in render_against_gptq([path]) if line.startswith("| int3")}
    assert rows["q"][3:7] == ["0.900", "0.250", "0.9750", "0.244"]  # GPTQ/RTN from its own run's objectives
    assert rows["k"][3:7] == ["1.000", "0.250", "1.0000", "0.250"]
    assert rows["all"][2] == "2" and rows["all"][7:] == ["0.01 %", "50.00 %"]


def test_a_newer_baseline_record_wins_over_an_older_file_read_after_it(tmp_path: Path) -> None:
    protocol = {"evaluation": {"all_windows": True}}
    def gptq(ppl: float, run_dir: str) -> dict:
        return {"benchmark": "prune", "method": "gptq", "sparsity": "int3:g128", "options": {}, "ppl": {"wiki": ppl},
                "prune_seconds": 80, "protocol": protocol, "run_dir": run_dir}
    new, old = tmp_path / "awp_step_cpu.jsonl", tmp_path / "cpu_awp_full.jsonl"
    new.write_text(json.dumps(gptq(50.95, "runs/20261127-150657-gptq-int3-g128-6305")) + "\n")
    old.write_text(json.dumps(gptq(49.85, "runs/20261124-132100-gptq-int3-aaaa")) + "\n")
    row = next(line for line in render_steps([new, old]) if line.startswith("| int3:g128"))
    assert [c.strip() for c in row.strip("|").split("|")][2] == "50.95 (80 s)"
