"""``python -m toolkit measure`` on tiny saved models: what it records and refuses, never how fast."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from toolkit.cli.main import main
from toolkit.cli.measure import table
from toolkit.evaluation import footprint
from toolkit.models.load import load_model
from toolkit.models.save import save_checkpoint

QUICK = ["--batches", "1,2", "--prompt-tokens", "4", "--new-tokens", "2", "--repeats", "1", "--device", "cpu",
         "--threads", "1"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    loaded = load_model("tiny-llama")
    return save_checkpoint(loaded.model, loaded.codec, tmp_path_factory.mktemp("measure") / "ckpt")


def test_a_saved_model_against_its_dense_source(saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "m.json"
    assert main(["measure", str(saved), "--baseline", "tiny-llama", *QUICK, "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    model, dense = record["models"]
    assert model["bytes_on_disk"] == sum(f.stat().st_size for f in saved.glob("*.safetensors"))
    assert dense["bytes_on_disk"] is None and dense["name"] == "tiny-llama"  # built, read from no folder
    assert model["params"] == dense["params"] and model["dtype"] == "float32"
    assert record["batches"] == [1, 2] and record["threads"] == 1 and record["device"] == "cpu"
    for entry in record["models"]:
        assert [t["batch"] for t in entry["speed"]] == [1, 2]
        assert all(math.isfinite(t[k]) and t[k] > 0 for t in entry["speed"]
                   for k in ("prefill_tokens_per_s", "decode_tokens_per_s", "tokens_per_s"))
        assert entry["load"]["host_ready_mb"] >= entry["load"]["host_peak_mb"] > 0
        assert entry["load"]["device_mb"] is None
    printed = capsys.readouterr().out
    assert "decode tokens/s, batch 2" in printed and "not smaller or faster as saved" in printed


def test_a_run_folder_is_measured_against_the_model_its_run_names(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    from tests.helpers.recovery import parent_run

    run = parent_run(tmp_path / "runs", method="numerical", sparsity="structured:50%", unit="heads+channels")
    assert footprint.run_source(run / "model") == "tiny-llama"
    assert main(["measure", str(run), *QUICK, "--json", str(tmp_path / "m.json")]) == 0
    model, dense = json.loads((tmp_path / "m.json").read_text())["models"]
    assert model["name"] == str(run / "model") and dense["name"] == "tiny-llama"
    assert model["params"] < dense["params"]  # heads and channels removed
    assert "not smaller or faster" not in capsys.readouterr().out


def _folder(tmp_path: Path, *files: str) -> Path:
    folder = tmp_path / "folder"
    folder.mkdir()
    for name in files:
        (folder / name).write_text(json.dumps({"model_type": "llama"}) if name == "config.json" else "x")
    return folder


@pytest.mark.parametrize(("make", "extra", "message"), [
    (lambda p: p / "missing", [], "does not exist"),
    (lambda p: _folder(p, "config.json", "tokenizer.json"), ["--baseline", "none"], "no \\*.safetensors"),
    (lambda p: _folder(p, "config.json", "tokenizer.json", "pytorch_model.bin"), ["--baseline", "none"],
     "only pickle weights"),
    (lambda p: _folder(p, "notes.txt"), ["--baseline", "none"], "no config.json"),
    (lambda p: (p / "file.txt", (p / "file.txt").write_text("x"))[0], [], "is a file"),
    ("saved", ["--baseline", "none", "--batches", "0,8"], "--batches sizes must be ≥ 1"),
    ("saved", ["--baseline", "none", "--batches", "one"], "whole numbers"),
    ("saved", ["--baseline", "none", "--new-tokens", "1"], "new tokens must be ≥ 2"),
    ("saved", [], "not a PruneLab run's model"),
    ("saved", ["--baseline", str(Path("/nonexistent/dense"))], "does not exist"),
])
def test_bad_input_is_one_line_before_any_model_loads(make: object, extra: list[str], message: str, saved: Path,
                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(footprint, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    monkeypatch.setattr(footprint, "host_load_memory", lambda *a, **k: pytest.fail("a model was loaded"))
    folder = saved if make == "saved" else make(tmp_path)  # type: ignore[operator]
    assert main(["measure", str(folder), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")
    assert __import__("re").search(message, err[0]), err[0]


def test_a_baseline_with_another_vocabulary_is_refused(tmp_path: Path) -> None:
    from toolkit.errors import ToolkitError

    loaded = load_model("tiny-llama")
    loaded.model.resize_token_embeddings(300)  # type: ignore[operator]
    other = save_checkpoint(loaded.model, loaded.codec, tmp_path / "other")
    settings = footprint.Settings(__import__("torch").device("cpu"), (1,), 4, 2, 1)
    with pytest.raises(ToolkitError, match="do not share a vocabulary"):
        footprint.measure(other, "tiny-llama", settings)


def test_the_table_is_built_from_the_record_alone() -> None:
    speed = [{"batch": 1, "prefill_tokens_per_s": 100.0, "decode_tokens_per_s": 10.0}]
    model = {"name": "small", "dtype": "bfloat16", "params": 70, "bytes_on_disk": 2**20,
             "load": {"host_peak_mb": 50.0, "device_mb": None}, "speed": speed}
    dense = {**model, "name": "dense", "params": 100, "bytes_on_disk": 2 * 2**20,
             "speed": [{**speed[0], "decode_tokens_per_s": 8.0}]}
    record = {"device": "cpu", "threads": 2, "prompt_tokens": 4, "new_tokens": 2, "repeats": 1, "batches": [1],
              "models": [model, dense]}
    lines = table(record).splitlines()
    assert lines[0].startswith("measured on cpu, 2 threads")
    rows = {line[:26].strip(): line[26:].split() for line in lines if line[:26].strip()}
    assert rows["safetensors on disk"] == ["1.0", "MiB", "2.0", "MiB", "0.50"]
    assert rows["decode tokens/s, batch 1"] == ["10.0", "8.0", "1.25"]
    assert "load: device memory" not in rows  # not on a GPU: no row
    assert "not smaller" not in table(record)
    same = {**record, "models": [{**model, "params": 100, "bytes_on_disk": 2 * 2**20}, dense]}
    assert "not smaller or faster as saved" in table(same)
    packed = {**record, "models": [{**model, "params": 100}, dense]}  # INT4 codes: dequantized to the same shapes
    assert table(packed).splitlines()[-1].startswith("smaller on disk, not faster: its weights take 0.50× the dense "
                                                     "source's (1.0 MiB less), but they load dequantized into bfloat16")
