"""The notebook's RecoveryPanel (toolkit/notebook/recovery.py) on a tiny saved run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.recovery import parent_run
from toolkit.errors import ToolkitError
from toolkit.widgets import RecoveryPanel


def test_the_panel_recovers_and_draws_the_loss_live(tmp_path: Path) -> None:
    parent = parent_run(tmp_path)
    panel = RecoveryPanel(parent.name, steps=3, runs_dir=tmp_path, lr=1e-2)
    view = panel.run()
    assert view.status == "finished" and panel.result is not None and panel.result["parent"] == parent.name
    assert list(panel.figure.data[0].x) == [1, 2, 3] and "→" in panel.figure.layout.title.text
    saved = panel.figure.get_state()["_widget_data"]  # kept in the widget state a saved notebook holds
    assert panel.figure in panel.widget.children and list(saved[0]["x"]) == [1, 2, 3]
    assert "finished" in panel.status.value and "<th>before</th><th>after</th>" in panel.result_html.value
    panel.steps.value = 1
    panel.run(rank=1000)
    assert "--rank 1000 is larger than" in panel.status.value and panel.view.status == "failed"
    panel.run_box.value = str(tmp_path / "nope")
    panel.run()
    assert "is not a run folder" in panel.status.value


def test_the_panel_trains_the_linears_when_full_is_chosen(tmp_path: Path) -> None:
    parent = parent_run(tmp_path)
    panel = RecoveryPanel(parent.name, steps=2, runs_dir=tmp_path, lr=1e-3)
    assert panel.train in panel.widget.children[1].children and panel.train.value == "lora"
    panel.train.value = "full"
    panel.run()
    assert panel.view.status == "finished" and panel.result is not None
    assert panel.result["options"]["train"] == "full"
    with pytest.raises(ToolkitError, match="unknown train='bogus'"):
        RecoveryPanel(parent.name, runs_dir=tmp_path, train="bogus")
