"""Input the Run tab refuses, not changes: one line in the status, in the page's words; nothing queued, nothing run.

Model errors (a path that does not exist, an unknown name, a hub id while the hub is unreachable)
are found before the run asks for the device, so they never wait behind another job.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from app import forms, run_tab
from app.page_words import page_words
from app.run_tab import run_stream
from toolkit.errors import ToolkitError

QUICK = forms.Protocol(nsamples=4, seqlen=32, eval_seqlen=32, eval_windows=2, device="cpu")


def settings(**fields: Any) -> forms.RunSettings:
    return forms.RunSettings(**{"model": "tiny-llama", "method": "wanda", "protocol": QUICK, **fields})


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device queue and the run fail the test if they are reached; the hub is offline."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        pytest.fail("a refused input reached the device queue or the run")

    monkeypatch.setattr(run_tab, "device_queue", refuse)
    monkeypatch.setattr(run_tab, "run", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize(("fields", "message"), [
    ({"percent": 150}, "sparsity 150.0% is outside [0, 100)"),
    ({"percent": -5}, "sparsity -5.0% is outside [0, 100)"),
    ({"protocol": dataclasses.replace(QUICK, nsamples=0)}, "nsamples must be a whole number ≥ 1, got 0"),
    ({"model": "", "model_path": ""}, "no model given"),
    ({"model": "smollm2-136m"}, "did you mean 'smollm2-135m'?"),
    ({"model": "tiny-lama"}, "unknown tiny model 'tiny-lama'"),
    ({"model_path": "/no/such/checkpoint"}, "'/no/such/checkpoint' does not exist"),
    ({"model_path": "nobody/not-a-model"}, "needs the hub, which is not reachable"),
])
def test_refused_input_is_one_line_and_nothing_is_queued(tmp_path: Path, nothing_runs: None, fields: dict,
                                                         message: str) -> None:
    updates = list(run_stream(settings(**fields), runs_dir=str(tmp_path), session="refused"))
    assert len(updates) == 1 and set(updates[0]) == {"status"}  # one message: no toast, no second line
    status = updates[0]["status"]
    assert status.startswith("**⚠") and message in status and status.count("⚠") == 1 and "\n" not in status
    assert not list(tmp_path.iterdir())  # no run folder


def test_a_hub_id_the_hub_does_not_know_is_refused_before_the_queue(tmp_path: Path, nothing_runs: None,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import toolkit.models.sources

    monkeypatch.setattr(toolkit.models.sources, "hub_reachable", lambda timeout=3.0: True)
    monkeypatch.setattr(forms, "_on_hub", lambda name: False)
    (update,) = run_stream(settings(model_path="nobody/not-a-model"), runs_dir=str(tmp_path), session="hub")
    assert "there is no model 'nobody/not-a-model' on the Hugging Face hub" in update["status"]


def test_a_hub_id_in_the_local_cache_needs_no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(forms, "_hub_cached", lambda name: name == "org/cached-model")
    forms.check_model_available("org/cached-model")  # no error
    forms.check_model_available("tiny-llama")
    with pytest.raises(ToolkitError, match="needs the hub"):
        forms.check_model_available("org/other-model")


@pytest.mark.parametrize(("message", "page"), [
    ("drop --save-model or quantize with rtn", 'untick "Save the pruned checkpoint" or quantize with rtn'),
    ("free disk space and rerun with --save-model", 'free disk space and run again with "Save the pruned checkpoint" '
                                                    "ticked"),
    ("with --refine dsnot the masks", 'with "Mask refinement: DSnoT" the masks'),
    ("flap plans its own per-layer removal: drop --allocation", 'flap plans its own per-layer removal: drop '
                                                                '"Layer allocation"'),
    ("weights), --sparsity is 0.5000: they differ", 'weights), "Sparsity (%)" is 50 %: they differ'),
    ("lower --nsamples, --seqlen or --set batch size", 'lower "nsamples", "seqlen" or "Extra options" batch size'),
    ("--devices cuda:0,cuda:1 names 2", '"Device" cuda:0,cuda:1 names 2'),
    ("--eval-seqlen must be ≥ 2", '"eval seqlen" must be ≥ 2'),
    ("streaming: drop --stream", "streaming: drop --stream"),  # no control on the page: left as it is
])
def test_page_messages_name_the_page_controls(message: str, page: str) -> None:
    assert page_words(message) == page
