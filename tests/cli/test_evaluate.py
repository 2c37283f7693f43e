"""``eval`` scores only what was asked, shows a bar for every stage, and its --json stays valid either way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import toolkit.evaluation.perplexity as perplexity_module
from toolkit.cli.main import main


def test_tasks_without_data_skip_the_perplexity_and_say_how_to_score_it(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: object, **kwargs: object) -> float:
        raise AssertionError("the perplexity was scored")

    monkeypatch.setattr(perplexity_module, "perplexity", never)
    out = tmp_path / "e.json"
    assert main(["eval", "--model", "tiny-llama", "--tasks", "rte", "--limit", "2", "--task-data", "local",
                 "--json", str(out)]) == 0
    printed = capsys.readouterr()
    assert printed.out.splitlines()[0] == "perplexity skipped: give --data wiki to score it too"
    assert "ppl (" not in printed.out and "zero-shot accuracy of tiny-llama" in printed.out
    assert "rte" in printed.err  # the task's bar
    report = json.loads(out.read_text())
    assert report["ppl"] == {} and report["model"] == "tiny-llama" and report["zero_shot"]["tasks"]["rte"]
    assert report["protocol"]["model"] == "tiny-llama" and "windows" not in report["protocol"]


def test_tasks_with_data_score_both(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "e.json"
    assert main(["eval", "--model", "tiny-llama", "--data", "wiki", "--seqlen", "64", "--windows", "3", "--tasks",
                 "rte", "--limit", "2", "--task-data", "local", "--json", str(out)]) == 0
    printed = capsys.readouterr()
    assert "ppl (wiki, seqlen 64, 3 windows, 192 tokens)" in printed.out and "skipped" not in printed.out
    assert "ppl wiki: 100%" in printed.err and "3/3" in printed.err  # the perplexity's own bar
    report = json.loads(out.read_text())
    assert set(report["ppl"]) == {"wiki"} and report["protocol"]["windows"] == 3 and "zero_shot" in report


def test_without_tasks_the_perplexity_is_scored_with_a_bar(capsys: pytest.CaptureFixture) -> None:
    assert main(["eval", "--model", "tiny-gpt2", "--seqlen", "64", "--windows", "5"]) == 0
    printed = capsys.readouterr()
    assert "ppl (wiki, seqlen 64, 5 windows" in printed.out
    assert "ppl wiki:   0%|          | 0/5" in printed.err  # opened before the first window
    assert "5/5" in printed.err


def test_data_none_skips_it_and_nothing_to_do_is_refused(capsys: pytest.CaptureFixture,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["eval", "--model", "no-such-model", "--data", "none"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --data none leaves nothing to evaluate: give --tasks") and err.count("\n") == 1
    monkeypatch.setattr(perplexity_module, "perplexity", lambda *a, **k: pytest.fail("scored"))
    assert main(["eval", "--model", "tiny-llama", "--data", "none", "--tasks", "rte", "--limit", "1",
                 "--task-data", "local"]) == 0
    assert capsys.readouterr().out.startswith("perplexity skipped (--data none)\n")


@pytest.mark.parametrize(("argv", "words"), [
    (["--tasks", "rte", "--windows", "2", "--seqlen", "64"],
     "--seqlen and --windows apply to the perplexity, but with --tasks the perplexity is scored only when --data "
     "is given: give --data wiki (or a text) to score it, or drop --seqlen and --windows"),
    (["--tasks", "rte", "--seqlen", "64"], "--seqlen applies to the perplexity, but with --tasks"),
    (["--tasks", "rte", "--encoding", "latin-1"], "--encoding applies to the perplexity"),
    (["--tasks", "rte", "--data", "none", "--windows", "2"], "--windows applies to the perplexity, but --data none "
                                                             "skips the perplexity"),
    (["--task-data", "local"], "--task-data chooses where the zero-shot tasks come from: give --tasks too"),
    (["--limit", "3"], "--limit counts examples per zero-shot task: give --tasks too"),
])
def test_a_flag_that_would_not_apply_is_refused_with_one_line(argv: list[str], words: str,
                                                             capsys: pytest.CaptureFixture,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import toolkit.models.load as load_module

    monkeypatch.setattr(load_module, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    assert main(["eval", "--model", "tiny-llama", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err


def test_the_default_window_is_512_when_seqlen_is_not_given(capsys: pytest.CaptureFixture) -> None:
    assert main(["eval", "--model", "tiny-llama", "--windows", "1"]) == 0
    assert "ppl (wiki, seqlen 512, 1 windows, 512 tokens)" in capsys.readouterr().out
