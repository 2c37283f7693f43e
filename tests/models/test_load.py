"""A run folder is a model source: its saved ``model/`` loads (said in one line); without one, one line says why."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from tests.helpers.block_models import logits
from toolkit.api import RunConfig, prune_model
from toolkit.cli.main import main
from toolkit.errors import ToolkitError
from toolkit.models.load import load_model
from toolkit.models.sources import check_model_source, run_model_folder

FAST = {"nsamples": 2, "seqlen": 32, "eval_seqlen": 32, "eval_windows": 2}


def _run(out: Path, save_model: bool) -> Path:
    result = prune_model(RunConfig(model="tiny-llama", method="magnitude", out_dir=str(out), save_model=save_model,
                                   **FAST))
    return Path(result["run_dir"])


def test_eval_of_a_run_folder_loads_its_saved_model(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    run_dir = _run(tmp_path, save_model=True)
    assert run_model_folder(run_dir) == run_dir / "model"
    with caplog.at_level(logging.WARNING, logger="toolkit.models.load"):
        assert main(["eval", "--model", str(run_dir), "--seqlen", "32", "--windows", "2"]) == 0
    said = [record.getMessage() for record in caplog.records if "run folder" in record.getMessage()]
    assert said == [f"{run_dir} is a run folder: loading the model it saved, {run_dir / 'model'}"]
    by_run = capsys.readouterr().out
    assert main(["eval", "--model", str(run_dir / "model"), "--seqlen", "32", "--windows", "2"]) == 0
    by_model = capsys.readouterr().out
    assert "ppl (wiki" in by_run and by_run.splitlines()[-1] == by_model.splitlines()[-1]
    loaded = load_model(str(run_dir))
    assert loaded.source == run_dir / "model"
    torch.testing.assert_close(logits(loaded.model), logits(load_model(str(run_dir / "model")).model))


def test_a_run_without_save_model_says_how_to_get_one(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run_dir = _run(tmp_path, save_model=False)
    assert main(["eval", "--model", str(run_dir), "--seqlen", "32", "--windows", "2"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(err) == 1 and "run folder" in err[0] and "saved no model" in err[0] and "--save-model" in err[0]
    assert "restore" not in err[0]
    with pytest.raises(ToolkitError, match="saved no model"):
        check_model_source(str(run_dir))
    with pytest.raises(ToolkitError, match="saved no model"):
        RunConfig(model=str(run_dir), method="wanda")


def test_a_checkpoint_folder_is_not_a_run_folder(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, save_model=True)
    assert run_model_folder(run_dir / "model") is None
    assert run_model_folder(tmp_path) is None
