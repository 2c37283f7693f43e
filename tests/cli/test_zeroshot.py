"""`eval --tasks/--limit` and `generate` on tiny models; bad input is one line, before any model loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.cli.main import main
from toolkit.evaluation.generate import DEFAULT_PROMPTS, Generation, compare_models, generate, side_by_side
from toolkit.models.load import load_model


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


NO_SUCH_MODEL = ["--model", "no-such-model-anywhere"]  # loading it would fail: the task check must come first


@pytest.mark.parametrize(("argv", "message"), [
    (["eval", *NO_SUCH_MODEL, "--tasks", "boolq,hellaswg"], "Did you mean: hellaswag"),
    (["eval", *NO_SUCH_MODEL, "--tasks", "mmlu"], "Known tasks: boolq, rte, hellaswag"),
    (["eval", *NO_SUCH_MODEL, "--tasks", "rte", "--limit", "0"], "--limit must be ≥ 1"),
    (["eval", *NO_SUCH_MODEL, "--limit", "5"], "give --tasks too"),
    (["eval", *NO_SUCH_MODEL, "--tasks", "piqa", "--task-data", "local"], "no offline data for piqa"),
    (["eval", *NO_SUCH_MODEL, "--tasks", "boolq,lambada_openai"], "no offline data for lambada_openai"),
    (["generate", *NO_SUCH_MODEL, "--max-new-tokens", "0"], "--max-new-tokens must be ≥ 1"),
    (["generate", *NO_SUCH_MODEL, "--prompt", " "], "--prompt is empty"),
])
def test_bad_input_is_one_error_line(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0]


def test_bad_task_from_the_shell_has_no_traceback() -> None:
    proc = subprocess.run([sys.executable, "-m", "toolkit", "eval", "--tasks", "arc-easy"], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).parents[2], env={"HF_HUB_OFFLINE": "1",
                                                                                      "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: unknown task 'arc-easy'. Did you mean: arc_easy? Known tasks: boolq, rte, hellaswag, winogrande, "
        "arc_easy, arc_challenge, openbookqa, piqa, lambada_openai")


def test_eval_with_tasks(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "eval.json"
    assert main(["eval", "--model", "tiny-llama", "--data", "wiki", "--seqlen", "64", "--windows", "2", "--tasks",
                 "rte,arc_challenge", "--limit", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "ppl (wiki" in printed and "rte " in printed and "arc_challenge" in printed and "mean" in printed
    assert "lm-eval's stock arc_challenge scores test" in printed
    data = json.loads(out.read_text())
    assert set(data["zero_shot"]["tasks"]) == {"rte", "arc_challenge"} and data["zero_shot"]["mean"] is not None
    assert data["zero_shot"]["tasks"]["arc_challenge"]["metric"] == "acc_norm"
    assert data["zero_shot"]["tasks"]["rte"]["examples"] == 2 and data["ppl"]["wiki"] > 1


def test_eval_with_tasks_loads_the_model_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import toolkit.models.load

    loads: list[str] = []
    real = toolkit.models.load.load_model

    def counted(name: str, **options: str) -> object:
        loads.append(name)
        return real(name, **options)

    monkeypatch.setattr(toolkit.models.load, "load_model", counted)
    assert main(["eval", "--model", "tiny-llama", "--data", "wiki", "--seqlen", "64", "--windows", "1", "--tasks",
                 "rte", "--limit", "1", "--task-data", "local"]) == 0
    assert loads == ["tiny-llama"]


def test_generate_is_deterministic(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    texts = []
    for run in range(2):
        out = tmp_path / f"g{run}.json"
        assert main(["generate", "--model", "tiny-llama", "--prompt", "Once upon", "--prompt", "x = ",
                     "--max-new-tokens", "12", "--device", "cpu", "--json", str(out)]) == 0
        data = json.loads(out.read_text())
        texts.append([g["text"] for g in data["generations"]])
        assert data["protocol"]["decoding"] == "greedy" and data["protocol"]["max_new_tokens"] == 12
        assert all(g["new_tokens"] == 12 and g["tokens_per_s"] > 0 for g in data["generations"])
    assert texts[0] == texts[1]
    assert "tokens/s" in capsys.readouterr().out


def test_side_by_side_records() -> None:
    dense = load_model("tiny-llama")
    pruned = load_model("tiny-llama")
    records = compare_models(dense.model, pruned.model, dense.codec, DEFAULT_PROMPTS[:2], max_new_tokens=8)
    assert [r["prompt"] for r in records] == list(DEFAULT_PROMPTS[:2])
    assert all(r["identical"] and r["first_difference"] is None for r in records)
    pruned.model.model.layers[0].mlp.down_proj.weight.data.zero_()
    changed = side_by_side(generate(dense.model, dense.codec, ["abc"], 16), generate(pruned.model, dense.codec,
                                                                                     ["abc"], 16))
    assert changed[0]["identical"] is (changed[0]["dense"] == changed[0]["pruned"])
    a, b = Generation("p", "hello", 1, 5, 1.0, "eos"), Generation("p", "help!", 1, 5, 1.0, "eos")
    assert side_by_side([a], [b])[0]["first_difference"] == 3
