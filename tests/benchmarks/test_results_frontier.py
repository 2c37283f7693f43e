"""docs/results.md's frontier section: the table, the fronts it names (computed), the figure it links."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import results_frontier
from benchmarks.results_frontier import FILE, PNG, render_frontier
from benchmarks.results_read import RESULTS, protocol_lines
from tests.figures.frontier_records import RECORDS
from tests.helpers.records import write_jsonl


def test_the_table_gives_each_output_its_figures_and_its_place_on_the_fronts(tmp_path: Path) -> None:
    lines = render_frontier([write_jsonl(tmp_path / "frontier.jsonl", RECORDS)])
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ")}
    assert rows["dense"] == ("| dense | 20.00 (1.00×) | 500.0 | 20.0 (1.00×) | 100.0 (1.00×) | yes | yes | "
                             "dense source (`abc1234`) |")
    assert "| 25.00 (1.25×) | 400.0 | 26.0 (1.30×) | 130.0 (1.30×) | yes | yes |" in rows["numerical 20%"]
    assert "| no | no |" in rows["slow one"]
    assert ("| est. 160.0 MiB, not savable: AWQ cannot be saved | not measured | not measured | – | – | "
            "awq `20261127-000000-awq-ab12` (`abc1234`) |") in rows["AWQ INT4"]
    text = "\n".join(lines)
    assert ("perplexity–speed front (decode tokens/s at batch 1 relative to dense): "
            "**dense, numerical 20%, depth 8 layers**") in text
    assert "- On neither front: slow one." in lines
    assert "- No measured speed, so not on the speed front: AWQ INT4." in lines
    assert "cpu, 1 thread(s), batches 1, 8" in text and "3.0 to 5.5" in text
    assert lines[-1].endswith("(frontier.png)")


def test_the_front_follows_the_numbers_not_the_names(tmp_path: Path) -> None:
    faster = [dict(r) for r in RECORDS]
    faster[3] = {**faster[3], "ppl": 22.0, "speed": {**faster[3]["speed"], "decode_tokens_per_s": {"1": 40.0,
                                                                                                   "8": 200.0}}}
    text = "\n".join(render_frontier([write_jsonl(tmp_path / "frontier.jsonl", faster)]))
    # slow one is now better than numerical 20% and depth 8 layers on both perplexity and speed
    assert "relative to dense): **dense, slow one**. Behind it: numerical 20%, depth 8 layers." in text


def test_a_size_nobody_measured_says_so_rather_than_inventing_one(tmp_path: Path) -> None:
    unknown = {**RECORDS[0], "bytes_on_disk": None, "bytes_estimated": None}
    row = next(line for line in render_frontier([write_jsonl(tmp_path / "f.jsonl", [unknown, RECORDS[1]])])
               if line.startswith("| dense"))
    assert "| 20.00 (1.00×) | not measured | 20.0 (1.00×) |" in row and row.count("| – |") == 1  # no size front


def test_no_record_says_so(tmp_path: Path) -> None:
    assert "No frontier measurement yet" in render_frontier([write_jsonl(tmp_path / "empty.jsonl", [])])[0]


def test_the_records_protocol_lines_read_a_dense_record_without_calibration() -> None:
    dense = {**RECORDS[0], "protocol": {"evaluation": {"dataset": "wiki", "split": "test", "seqlen": 512,
                                                      "windows": 210}}}
    assert protocol_lines([dense]) == ["- evaluation wiki test, seqlen 512, 210 windows; dense perplexity 20.00"]


def test_the_png_is_drawn_from_the_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results_frontier, "RESULTS", tmp_path)
    assert results_frontier.draw_png(tmp_path / "f.png") is None  # no records: nothing written
    write_jsonl(tmp_path / FILE, RECORDS)
    written = results_frontier.draw_png(tmp_path / "f.png")
    assert written is not None and written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_committed_records_come_with_their_figure() -> None:
    if not (RESULTS / FILE).exists():
        pytest.skip(f"no {FILE} committed yet")
    assert PNG.exists(), "docs/frontier.png is missing: run python -m benchmarks.results_doc"
