"""``prune`` refuses a bad input file with one ``error:`` line and exit 2, before the model loads; no run folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import toolkit.run.pipeline as pipeline_module
from tests.models.test_stream import save_tiny
from toolkit.cli.main import main

QUICK = ["--nsamples", "2", "--seqlen", "16", "--eval", "none"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("src") / "llama", "llama", "float32")


@pytest.mark.parametrize("stream", [False, True], ids=["in-memory", "stream"])
@pytest.mark.parametrize(("content", "words"), [
    ({"layers": [0.5, 0.5, 0.5]}, "has 3 layer ratios; the model has 2 decoder layers: give one ratio per layer"),
    ({"layers": [0.5, 1.0]}, "layer 1's ratio 1 is outside [0, 1)"),
    ({"layers": [-0.2, 0.5]}, "layer 0's ratio -0.2 is outside [0, 1)"),
    ('{"layers": [NaN, 0.5]}', "layer 0's ratio nan is not a finite number"),
    ('{"layers": [0.5, Infinity]}', "layer 1's ratio inf is not a finite number"),
    ({"layers": [0.3, 0.5]}, "the ratios give a total sparsity of 0.4000"),
    (None, "is a folder, not a file"),
])
def test_a_bad_allocation_file(content: object, words: str, stream: bool, folder: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline_module, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    monkeypatch.setattr(pipeline_module, "open_streamed", lambda *a, **k: pytest.fail("the model was loaded"))
    ratios = tmp_path / "x.json"
    if content is None:
        ratios.mkdir()
    else:
        ratios.write_text(content if isinstance(content, str) else json.dumps(content))
    store = tmp_path / "runs"
    model = ["--model", str(folder), "--stream"] if stream else ["--model", "tiny-llama"]
    assert main(["prune", *model, *QUICK, "--allocation", str(ratios), "--out", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and words in err
    assert not store.exists() or not any(store.iterdir())  # no failed run left in the store


@pytest.mark.parametrize(("allocation", "words"), [
    ("owl:inf,0.1", "M and λ must be finite numbers"), ("owl:nan,0.1", "M and λ must be finite numbers"),
    ("owl:5,-0.1", "λ must be in [0, 0.5)"), ("owl:5,1", "λ must be in [0, 0.5)"), ("owl:-5,0.1", "M must be > 0"),
])
def test_bad_owl_parameters(allocation: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    store = tmp_path / "runs"
    assert main(["prune", "--model", "tiny-llama", *QUICK, "--allocation", allocation, "--out", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and not store.exists()


def test_rtn_with_allocation_is_told_the_truth(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["prune", "--model", "tiny-llama", *QUICK, "--method", "rtn", "--quant", "int4", "--out", str(tmp_path)]
    assert main([*argv, "--allocation", "owl"]) == 2
    err = capsys.readouterr().err
    assert "rtn quantizes only and prunes nothing: drop --allocation" in err and "give --sparsity" not in err
    assert main([*argv, "--sparsity", "50%"]) == 2  # the advice it no longer gives is refused by rtn
    assert "--sparsity" in capsys.readouterr().err
