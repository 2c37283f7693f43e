"""The notebook's RecoveryPanel (toolkit/notebook/recovery.py) on a tiny saved run."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.recovery import parent_run
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
