"""Bad input gives one ``error:`` line (exit 2) before any model loads or any run folder is written.

Each case is a mistake a new user makes: a folder that is not a checkpoint, a broken .gguf, pickle
weights, a binary or latin-1 text, an --out or --json that cannot be written, a device this torch
lacks, a hub id offline, windows of 0 or 1 tokens. Faults of the machine (disk full) are one line
too, and leave the run marked failed.
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from app import forms, run_tab
from tests.app.test_app import drain
from toolkit.cli.main import main
from toolkit.models import load as models
from toolkit.run import preflight
from toolkit.store.runs import RunWriter, list_runs

FAST = ["--nsamples", "2", "--seqlen", "32", "--eval-seqlen", "32", "--eval-windows", "2"]


def _folder(tmp: Path, files: dict[str, bytes]) -> str:
    folder = tmp / "model"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return str(folder)


CONFIG = b'{"model_type": "llama"}'
CASES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "empty-model-folder": (lambda t: ["prune", "--model", _folder(t, {})], "is empty"),
    "junk-gguf": (lambda t: ["prune", "--model", _write(t / "m.gguf", b"junk")], "is not a GGUF file"),
    "folder-without-tokenizer": (
        lambda t: ["prune", "--model", _folder(t, {"config.json": CONFIG, "model.safetensors": b"x"})],
        "has no tokenizer"),
    "pickle-weights": (lambda t: ["prune", "--model", _folder(t, {"config.json": CONFIG, "pytorch_model.bin": b"x"})],
                       "only safetensors are loaded"),
    "binary-calib": (lambda t: ["prune", "--calib", _write(t / "b.txt", b"\x00\x01\x02" * 100)], "binary, not text"),
    "latin1-eval": (lambda t: ["prune", "--eval", _write(t / "l.txt", "café ".encode("latin-1") * 99)],
                    "--encoding latin-1"),
    "out-is-a-file": (lambda t: ["prune", "--out", _write(t / "f", b"")], "is a file, not a folder"),
    "json-missing-folder": (lambda t: ["prune", "--json", str(t / "missing" / "r.json")], "does not exist"),
    "device-mps": (lambda t: ["prune", "--device", "mps"], "device 'mps' is not usable"),
    "device-unknown": (lambda t: ["prune", "--device", "tpu9"], "unknown device"),
    "eval-seqlen-1": (lambda t: ["eval", "--seqlen", "1"], "--seqlen must be ≥ 2"),
    "eval-seqlen-0": (lambda t: ["eval", "--seqlen", "0"], "--seqlen must be ≥ 2"),
    "eval-windows-0": (lambda t: ["eval", "--windows", "0"], "--windows must be ≥ 1"),
    "eval-windows-negative": (lambda t: ["eval", "--windows", "-1"], "--windows must be ≥ 1"),
    "prune-eval-windows-0": (lambda t: ["prune", "--eval-windows", "0"], "--eval-windows must be ≥ 1"),
    "eval-seqlen-past-positions": (lambda t: ["prune", "--eval-seqlen", "100000"], "exceeds tiny-llama's 512"),
    "unknown-encoding": (lambda t: ["eval", "--encoding", "klingon"], "unknown text encoding"),
    "missing-model-path": (lambda t: ["prune", "--model", str(t / "nowhere")], "does not exist"),
}


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _argv(kind: str, tmp: Path) -> list[str]:
    argv = CASES[kind][0](tmp)
    defaults = {"--model": "tiny-llama", "--out": str(tmp / "runs"), **dict(zip(FAST[::2], FAST[1::2], strict=True))}
    if argv[0] == "prune":
        argv += [item for flag, value in defaults.items() if flag not in argv for item in (flag, value)]
    elif "--model" not in argv:
        argv += ["--model", "tiny-llama"]
    return argv


@pytest.mark.parametrize("kind", CASES)
def test_bad_input_is_one_error_line(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "hub_reachable", lambda timeout=3.0: False)
    assert main(_argv(kind, tmp_path)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and CASES[kind][1] in err[0], err
    assert list_runs(tmp_path / "runs") == []  # refused before a run folder was written


def test_hub_id_without_slash_says_it_needs_the_hub(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(models, "hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["eval", "--model", "gpt2"]) == 2
    assert "as a Hugging Face hub id it needs the hub" in capsys.readouterr().err


def test_read_only_out_refused_before_loading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(preflight.tempfile, "TemporaryFile", refuse)
    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    assert main(["prune", "--model", "tiny-llama", *FAST, "--out", str(tmp_path / "ro")]) == 2
    assert "cannot write in --out" in capsys.readouterr().err


def test_latin1_text_with_encoding_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    text = _write(tmp_path / "l.txt", ("Düsseldorf café " * 400).encode("latin-1"))
    argv = ["eval", "--model", "tiny-llama", "--data", text, "--encoding", "latin-1", "--seqlen", "64",
            "--windows", "2"]
    assert main(argv) == 0
    assert "ppl (" in capsys.readouterr().out


def test_disk_full_marks_the_run_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture) -> None:
    def full(self: RunWriter, layer: int, name: str, keep: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path / "masks" / name))

    monkeypatch.setattr(RunWriter, "mask", full)
    assert main(["prune", "--model", "tiny-llama", *FAST[:4], "--eval", "none", "--out", str(tmp_path)]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]  # less the progress bars
    assert len(err) == 1 and err[0].startswith("error: the disk is full"), err
    (record,) = list_runs(tmp_path)
    assert record.status == "failed" and "No space left on device" in record.error
    assert not list(record.path.glob("*.tmp"))


def test_debug_shows_the_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("library failure")

    monkeypatch.setattr("toolkit.api.prune_model", boom)
    assert main(["prune", "--model", "tiny-llama", *FAST, "--out", str(tmp_path)]) == 1
    with pytest.raises(RuntimeError, match="library failure"):
        main(["--debug", "prune", "--model", "tiny-llama", *FAST, "--out", str(tmp_path)])


def test_app_shows_bad_model_folder_on_the_status_line(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"config.json": CONFIG, "pytorch_model.bin": b"x"})
    settings = forms.RunSettings(model_path=folder)
    (update,) = drain(run_tab.run_stream(settings, runs_dir=str(tmp_path / "runs")))
    assert update["status"].startswith("**⚠") and "only safetensors are loaded" in update["status"]


def test_status_json_is_valid_after_every_case(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, {"method": "wanda"})
    writer.fail("x", cancelled=False)
    assert json.loads((writer.path / "status.json").read_text())["status"] == "failed"
