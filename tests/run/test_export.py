"""``python -m toolkit export``: every bad input is one line before the model loads; a tiny run's refusals."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from toolkit.cli.main import main
from toolkit.errors import ToolkitError
from toolkit.run.export import ExportConfig, check_export, source_gguf


def _prune(out: Path, *extra: str) -> Path:
    before = set(out.iterdir())
    code = main(["prune", "--model", "tiny-llama", "--protocol", "quick", "--eval", "none", "--out", str(out),
                 *extra])
    assert code == 0
    (run,) = set(out.iterdir()) - before
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("runs")
    return {"sparse_saved": _prune(out, "--method", "wanda", "--sparsity", "50%", "--save-model"),
            "quant_saved": _prune(out, "--method", "rtn", "--quant", "int4:g32", "--save-model"),
            "not_saved": _prune(out, "--method", "magnitude", "--sparsity", "50%")}


def test_not_a_run_folder(tmp_path: Path) -> None:
    with pytest.raises(ToolkitError, match="is not a run folder"):
        check_export(ExportConfig(run_dir=str(tmp_path)))


def test_a_run_without_a_saved_model(runs: dict[str, Path]) -> None:
    with pytest.raises(ToolkitError, match="saved no model: prune again with --save-model"):
        check_export(ExportConfig(run_dir=str(runs["not_saved"])))


def test_a_model_that_did_not_come_from_a_gguf(runs: dict[str, Path]) -> None:
    with pytest.raises(ToolkitError, match="did not come from a GGUF"):
        check_export(ExportConfig(run_dir=str(runs["quant_saved"])))


def test_the_source_of_a_run_of_a_run_is_followed(runs: dict[str, Path], tmp_path: Path) -> None:
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    run = tmp_path / "run"
    shutil.copytree(runs["not_saved"], run)
    text = (run / "config.json").read_text().replace('"tiny-llama"', f'"{fake}"')
    (run / "config.json").write_text(text)
    assert source_gguf(str(run)) == fake


def test_an_existing_output_needs_force(runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    monkeypatch.setattr("toolkit.run.export.source_gguf", lambda model: tmp_path / "src.gguf")
    out = tmp_path / "out.gguf"
    out.write_bytes(b"x")
    with pytest.raises(ToolkitError, match="exists: give another --out, or --force"):
        check_export(ExportConfig(run_dir=str(runs["quant_saved"]), out=str(out)))
    plan = check_export(ExportConfig(run_dir=str(runs["quant_saved"]), out=str(out), force=True))
    assert plan.quantized and plan.out == out and not plan.notes
    with pytest.raises(ToolkitError, match="does not exist"):
        check_export(ExportConfig(run_dir=str(runs["quant_saved"]), out=str(tmp_path / "no" / "x.gguf")))


def test_a_sparse_run_is_said_to_be_stored_dense(runs: dict[str, Path], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("toolkit.run.export.source_gguf", lambda model: tmp_path / "src.gguf")
    plan = check_export(ExportConfig(run_dir=str(runs["sparse_saved"])))
    assert plan.notes and "stored dense" in plan.notes[0] and "50%" in plan.notes[0]
    with pytest.raises(ToolkitError, match="is not quantized: --type q4_0"):
        check_export(ExportConfig(run_dir=str(runs["sparse_saved"]), type="q4_0"))


def test_bad_format_and_type() -> None:
    with pytest.raises(ToolkitError, match="--format 'onnx'"):
        ExportConfig(run_dir="x", format="onnx")
    with pytest.raises(ToolkitError, match="--type 'q2_k'"):
        ExportConfig(run_dir="x", type="q2_k")


def test_cli_says_one_line(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(runs["not_saved"])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "--save-model" in err[0]
