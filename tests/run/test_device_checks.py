"""``--devices`` is read without torch by the config, and checked against the machine before ``--out`` exists."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from toolkit.api import RunConfig, prune_model
from toolkit.errors import ToolkitError
from toolkit.run.config import device_names

QUICK = {"model": "tiny-llama", "propagate": "dense", "nsamples": 2, "seqlen": 32, "eval_data": None}


@pytest.mark.parametrize(("text", "message"), [
    ("gpu0,,cpu", "--devices 'gpu0,,cpu' has an empty entry"),
    ("cuda:0,", "has an empty entry"),
    ("gpu0,cpu", "--devices gpu0,cpu: 'gpu0' is not a device name"),
    ("cuda:x,cpu", "'cuda:x' is not a device name"),
])
def test_a_malformed_list_is_refused_by_the_config(text: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(ToolkitError, match=message) as caught:
        RunConfig(**QUICK, devices=text, out_dir=str(tmp_path / "runs"))  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "runs").exists()


def test_device_names() -> None:
    assert device_names("auto") == []
    assert device_names(" cuda:0, cuda:1 ") == ["cuda:0", "cuda:1"]
    assert device_names("cpu,cpu") == ["cpu", "cpu"]


def test_missing_gpus_are_refused_before_the_out_folder_is_made(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = RunConfig(**QUICK, devices="cuda:0,cuda:1", out_dir=str(tmp_path / "runs"))  # type: ignore[arg-type]
    with pytest.raises(ToolkitError, match=r"--devices cuda:0,cuda:1: 'cuda:0' was asked for but no CUDA device"):
        prune_model(config)
    assert not (tmp_path / "runs").exists()  # no run folder, not even the --out folder
