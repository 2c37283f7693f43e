"""The run record names local files absolutely; a recovery finds an older record's relative calibration text or says so.

Also: a flag the method cannot use is refused with advice the method then accepts.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.recovery import parent_run
from toolkit.errors import ToolkitError
from toolkit.run.config import RunConfig, recorded_source
from toolkit.run.recover_config import RecoverConfig, read_parent

FAST: dict[str, Any] = dict(model="tiny-llama", nsamples=2, seqlen=16, eval_seqlen=16, eval_windows=1)
TEXT = "The quick brown fox jumps over the lazy dog. " * 40


def test_relative_text_files_are_recorded_absolutely(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "calib.txt").write_text(TEXT)
    (tmp_path / "eval.txt").write_text(TEXT)
    monkeypatch.chdir(tmp_path)
    config = RunConfig(**FAST, calib="calib.txt", eval_data="eval.txt")
    data = config.to_dict()
    assert data["calib"] == str(tmp_path / "calib.txt") and data["eval_data"] == str(tmp_path / "eval.txt")
    assert data["cwd"] == str(tmp_path) and "cwd" not in config.reuse_key()
    assert RunConfig(**FAST, calib="wiki").calib == "wiki"  # dataset names stay names


@pytest.mark.parametrize("method", ["rtn", "gptq"])
def test_allocation_for_a_quantize_only_method_gives_advice_that_is_accepted(method: str) -> None:
    with pytest.raises(ToolkitError) as caught:
        RunConfig(**FAST, method=method, sparsity=None, quant="int4", allocation="owl")
    message = str(caught.value)
    assert f"{method} quantizes only and prunes nothing: drop --allocation" in message
    assert "give --sparsity" not in message
    RunConfig(**FAST, method=method, sparsity=None, quant="int4")  # the advice, followed: accepted
    RunConfig(**FAST, method="wanda", sparsity="50%", allocation="owl")  # and the other road it names


def test_a_non_finite_distributed_timeout_is_refused() -> None:
    with pytest.raises(ToolkitError, match="--dist-timeout must be > 0"):
        RunConfig(**FAST, propagate="dense", distributed=True, dist_timeout=math.inf)


def test_recorded_source_resolves_against_the_recorded_folder(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "calib.txt").write_text(TEXT)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert recorded_source("calib.txt", str(tmp_path), "calibration text", "r1") == str(tmp_path / "calib.txt")
    assert recorded_source("wiki", None, "calibration text", "r1") == "wiki"
    with pytest.raises(ToolkitError, match=r"run r1's calibration text is 'calib\.txt', a path relative to the folder"
                                           r" the run started in.*run this command from the folder"):
        recorded_source("calib.txt", None, "calibration text", "r1")
    with pytest.raises(ToolkitError, match="no longer exists: put the file back there"):
        recorded_source("gone.txt", str(tmp_path), "calibration text", "r1")


def test_recover_of_a_run_calibrated_on_a_relative_file_from_another_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "calib.txt").write_text(TEXT * 10)
    monkeypatch.chdir(work)
    run = parent_run(tmp_path / "runs", calib="calib.txt", eval_data=None)
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.chdir(other)
    assert read_parent(RecoverConfig(run_dir=str(run))).calib == str(work / "calib.txt")  # recorded absolutely
    config_path = run / "config.json"
    config = json.loads(config_path.read_text())
    config["calib"] = "calib.txt"  # as an older record kept it
    config_path.write_text(json.dumps(config))
    assert read_parent(RecoverConfig(run_dir=str(run))).calib == str(work / "calib.txt")  # its recorded cwd
    del config["cwd"]
    config_path.write_text(json.dumps(config))
    with pytest.raises(ToolkitError, match=r"'calib\.txt', a path relative to the folder the run started in"):
        read_parent(RecoverConfig(run_dir=str(run)))
    monkeypatch.chdir(work)
    assert read_parent(RecoverConfig(run_dir=str(run))).calib == os.path.abspath("calib.txt")
