"""The one-shot frontier table of docs/results.md: cells from the newest run of a name on the CPU protocol only,
"not measured" where no record fills a cell, the winners per column with their margins, and the --permute pairs."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.results_oneshot import cells_command, permute_line, render_oneshot, select_cells, winner_line

PROTOCOL = {"calibration": {"source": "wiki", "split": "train", "nsamples": 32, "seqlen": 512, "seed": 0},
            "evaluation": {"dataset": "wiki", "split": "test", "seqlen": 512, "windows": 210, "all_windows": True}}


def _run(run: str, ppl: float, stamp: str = "20261127-100000", permute: bool = False, **extra: object) -> dict:
    method, _, rest = run.partition("@")
    sparsity = rest.split(":")[0] if not rest.startswith(("2:4", "4:8")) else rest[:3]
    options = extra.pop("options", {})
    return {"benchmark": "prune", "run": run, "method": method, "sparsity": sparsity, "options": options,
            "quant": None, "unit": None, "permute": permute, "ppl": {"wiki": ppl}, "prune_seconds": 12.0,
            "protocol": PROTOCOL, "run_dir": f"runs/{stamp}-{method}", "versions": {"git": "abc1234"}, **extra}


def _rows(lines: list[str]) -> dict[str, list[str]]:
    """The first table's rows by method label."""
    table = lines[lines.index("Wiki perplexity (lower is better):") + 2:]
    table = table[:table.index("")]
    return {cells[0]: cells[1:] for line in table[2:] if (cells := [c.strip() for c in line.split("|")[1:-1]])}


def test_newest_run_of_a_name_fills_the_cell_and_other_protocols_are_left_out() -> None:
    records = [_run("wanda@50%", 40.0, "20261123-100000"), _run("wanda@50%", 36.5, "20261127-090000"),
               _run("wanda@50%", 35.0, "20261125-100000"),
               _run("sparsegpt@50%", 20.0, "20261128-000000", protocol={**PROTOCOL, "evaluation": {
                   **PROTOCOL["evaluation"], "windows": 40, "all_windows": False}}),  # the first windows only
               _run("awp@50%+int4", 18.0, quant="int4"),  # quantized
               _run("sparsegpt@50%:nsamples", 19.0, protocol={**PROTOCOL, "calibration": {
                   **PROTOCOL["calibration"], "nsamples": 128}}),  # another calibration
               _run("numerical@structured:30%", 50.0)]  # not a linear-scope method
    cells = select_cells(records)
    assert list(cells) == [("wanda", "50%")]
    assert cells["wanda", "50%"]["ppl"] == {"wiki": 36.5}


def test_rows_options_permuted_columns_and_not_measured_cells(tmp_path: Path) -> None:
    records = [_run("thanos@2:4:alpha=0.1", 45.0, options={"alpha": "0.1"}),
               _run("thanos@2:4:alpha=0.1,permute=1", 38.0, permute=True, options={"alpha": "0.1"},
                    layer_error={"mean": 0.123456}),
               _run("thanos@50%", 29.3)]
    path = tmp_path / "cells.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    lines = render_oneshot([path])
    rows = _rows(lines)
    assert list(rows) == ["magnitude", "wanda", "ria", "sparsegpt", "thanos", "thanos (alpha=0.1)", "fista",
                          "alps", "awp"]
    assert rows["thanos (alpha=0.1)"] == ["not measured"] * 3 + ["45.00", "38.00", "not measured", "not measured"]
    assert rows["thanos"][0] == "29.30" and rows["thanos"][1:] == ["not measured"] * 6
    assert rows["alps"] == ["not measured"] * 7
    assert "| thanos (alpha=0.1) | not measured | not measured | not measured | not recorded | 0.1235 |" in "\n".join(
        lines)
    assert "| thanos | 12 s | not measured |" in "\n".join(lines)


def test_winner_line_names_the_best_and_its_margins() -> None:
    cells = select_cells([_run("fista@50%", 25.0), _run("awp@50%", 28.0), _run("sparsegpt@50%", 30.0),
                          _run("sparsegpt@2:4", 60.0), _run("wanda@2:4", 90.0)])
    assert winner_line(cells, "50%") == ("- **50%** (3 rows measured): best **fista** 25.00; 10.7 % lower than the "
                                         "second-best, awp 28.00; 16.7 % lower than SparseGPT 30.00.")
    assert winner_line(cells, "2:4") == ("- **2:4** (2 rows measured): best **sparsegpt** 60.00; 33.3 % lower than "
                                         "the second-best, wanda 90.00; SparseGPT itself.")
    assert winner_line(cells, "70%") == "- **70%**: not measured."
    only_fista = select_cells([_run("fista@60%", 38.0)])
    assert winner_line(only_fista, "60%") == ("- **60%** (1 rows measured): best **fista** 38.00; the only one "
                                              "measured; SparseGPT not measured.")


def test_permute_pairs_say_where_it_helps_and_where_it_does_not() -> None:
    cells = select_cells([_run("wanda@2:4", 100.0), _run("wanda@2:4:permute=1", 80.0, permute=True),
                          _run("sparsegpt@2:4", 50.0), _run("sparsegpt@2:4:permute=1", 51.0, permute=True),
                          _run("ria@2:4:permute=1", 70.0, permute=True)])
    line = permute_line(cells, "2:4")
    assert "helps: wanda 100.00 → 80.00 (-20.0 %)." in line
    assert "It does not help: sparsegpt 50.00 → 51.00 (+2.0 %)." in line
    assert "Best 2:4 either way: sparsegpt 50.00." in line
    assert "No pair measured for magnitude, ria, thanos, fista, alps, awp." in line
    assert permute_line(cells, "4:8").startswith("- **4:8**: `--permute` helps: none of the measured pairs. It does "
                                                 "not help: none of the measured pairs. No pair measured for")


def test_the_command_names_the_files_runs_once_each_in_order(tmp_path: Path) -> None:
    path = tmp_path / "cells.jsonl"
    names = ["alps@50%", "ria@60%", "alps@50%", "a@1%", "b@2%", "c@3%", "thanos@4:8:alpha=0.1,permute=1"]
    path.write_text("".join(json.dumps({"run": n}) + "\n" for n in names))
    assert cells_command(path).splitlines()[:3] == [
        'for r in "alps@50%" "ria@60%" "a@1%" "b@2%" "c@3%" \\',
        '  "thanos@4:8:alpha=0.1,permute=1"; do',
        '  OMP_NUM_THREADS=1 python -m benchmarks.bench_prune --runs "$r" --no-dense '
        '--json benchmarks/results/cells.jsonl']
