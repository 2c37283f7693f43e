"""Thread count: the app leaves a core for the server, overrides win, the protocol reports the count used."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import forms
from toolkit.api import RunConfig, prune_model
from toolkit.errors import ToolkitError
from toolkit.runtime import threads


def test_pick_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(threads.ENV, raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    assert threads.pick_threads(serving=True) == 1  # one of two cores left for the UI
    assert threads.pick_threads() is None  # the CLI: torch's default
    assert threads.pick_threads(3, serving=True) == 3
    monkeypatch.setenv(threads.ENV, "2")
    assert threads.pick_threads(serving=True) == 2
    monkeypatch.setenv(threads.ENV, "many")
    with pytest.raises(ToolkitError, match="PRUNELAB_THREADS must be a whole number"):
        threads.pick_threads()
    with pytest.raises(ToolkitError, match="--threads must be ≥ 1"):
        threads.pick_threads(0)


def test_app_form_serves_with_a_core_to_spare(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(threads.ENV, raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    assert forms.to_config(forms.RunSettings(model="tiny-llama"), "runs").threads == 3


def test_protocol_reports_threads(tmp_path: Path) -> None:
    import torch

    before = torch.get_num_threads()
    try:
        result = prune_model(RunConfig(model="tiny-llama", nsamples=2, seqlen=32, eval_data=None, threads=1,
                                       out_dir=str(tmp_path)))
    finally:
        torch.set_num_threads(before)
    assert result["protocol"]["threads"] == 1
