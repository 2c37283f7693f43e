"""What a recovered model costs (toolkit/run/recover_bought.py): result.json's ``bought`` as a prune run has it.

On tiny models: a recovery of a shrunk parent measures its checkpoint's bytes and times it against
the dense source; of a masked parent it says the model is not smaller as saved; the CLI summary, the
app's recovery result and the Sweep tab's frontier read it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.recover_panel import result_markdown
from tests.helpers.recovery import parent_run
from toolkit.api import recover_model
from toolkit.cli.main import main
from toolkit.errors import ToolkitError
from toolkit.events import RunFinished, RunWarning
from toolkit.figures.frontier_runs import store_frontier
from toolkit.live.recovery import RecoveryView
from toolkit.run import recover_bought
from toolkit.run.accounting import weights_bytes
from toolkit.store.runs import list_runs, open_run

SHRUNK = {"method": "numerical", "sparsity": "structured:50%", "unit": "heads+channels", "eval_dense": True}


@pytest.fixture(scope="module")
def shrunk_parent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny run whose heads and channels were removed, its smaller model saved."""
    return parent_run(tmp_path_factory.mktemp("shrunk") / "runs", **SHRUNK)


@pytest.fixture(scope="module")
def recovered(shrunk_parent: Path) -> tuple[dict, list]:
    """A recovery of the shrunk parent in the parent's store: its result and events."""
    events: list = []
    result = recover_model(run=shrunk_parent, steps=2, lr=1e-3, device="cpu", on_event=events.append)
    return result, events


def test_a_recovered_shrunk_model_measures_its_bytes_and_speed_against_the_dense_source(
        shrunk_parent: Path, recovered: tuple[dict, list]) -> None:
    result, events = recovered
    parent = open_run(shrunk_parent).result or {}
    bought = result["bought"]
    assert bought["stored_as"] == "shrunk" and bought["bytes_measured"] and bought["smaller_as_saved"]
    assert bought["bytes_stored"] == weights_bytes(Path(result["run_dir"]) / "model") < bought["bytes_dense"]
    assert bought["bytes_dense"] == parent["bought"]["bytes_dense"]
    assert (bought["params_before"], bought["params_after"]) == (parent["bought"]["params_before"],
                                                                 parent["bought"]["params_after"])
    assert bought["params_after"] < bought["params_before"]
    assert bought["kept_weights"] == result["accounting"]["nonzeros_kept"]
    speed = bought["speed"]
    assert speed["device"] == "cpu" and speed["dense_tokens_per_s"] > 0 and speed["tokens_per_s"] > 0
    assert [t["batch"] for t in speed["by_batch"]] == [t["batch"] for t in speed["dense_by_batch"]] == [1, 8]
    (finished,) = [e for e in events if isinstance(e, RunFinished)]
    assert finished.bought == bought and (open_run(result["run_dir"]).result or {}).get("bought") == bought
    view = RecoveryView()
    for event in events:
        view.apply(event)
    assert "**What it bought**: heads and channels removed" in result_markdown(view)


def test_the_frontier_of_the_store_draws_the_recovered_run(shrunk_parent: Path, recovered: tuple[dict, list]) -> None:
    frontier = store_frontier(list_runs(shrunk_parent.parent))
    points = {p.label: p for p in frontier.points}
    point = points["numerical structured:50%@heads+channels + lm recovery"]
    assert point.speed is not None and point.speed > 0 and point.group == "shrunk" and not point.estimated
    assert point.ppl == pytest.approx(recovered[0]["ppl"]["wiki"])
    assert set(points) == {"dense", "numerical structured:50%@heads+channels",
                           "numerical structured:50%@heads+channels + lm recovery"}
    assert not any("recovery" in line for line in frontier.unmeasured)


def test_a_source_that_cannot_be_loaded_leaves_the_speed_unmeasured_and_says_why(
        shrunk_parent: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise ToolkitError("not here")

    monkeypatch.setattr(recover_bought, "check_model_source", missing)
    events: list = []
    result = recover_model(run=shrunk_parent, steps=1, lr=1e-3, device="cpu", out_dir=tmp_path,
                           on_event=events.append)
    assert result["bought"]["speed"] is None and result["bought"]["stored_as"] == "shrunk"
    assert any(isinstance(e, RunWarning) and "decode speed not measured" in e.message for e in events)


def test_a_recovered_masked_model_is_not_smaller_as_saved(store: Path, capsys: pytest.CaptureFixture) -> None:
    (folder,) = list(store.iterdir())
    assert main(["recover", str(folder), "--steps", "1", "--lr", "0.01"]) == 0
    (child,) = [r for r in list_runs(store) if r.config.get("method") == "recover"]
    bought = (child.result or {})["bought"]
    assert bought["stored_as"] == "dense" and not bought["smaller_as_saved"] and bought["speed"] is None
    assert bought["bytes_measured"] and bought["bytes_stored"] == weights_bytes(child.path / "model")
    assert bought["kept_weights"] < bought["params_before"] == bought["params_after"]
    out = capsys.readouterr().out
    assert "bought: " in out and "not smaller or faster as saved" in out
