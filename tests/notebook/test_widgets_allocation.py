"""Notebook widgets and layer allocation: the Dashboard's allocation / refine fields and panels, allocation_plot,
refine_plot, and sweep_plot's line per allocation (tiny-llama, synthetic stores).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.synthetic_runs import write_run
from toolkit.errors import ToolkitError
from toolkit.notebook.widgets import Dashboard, sweep_plot
from toolkit.widgets import allocation_plot, refine_plot

QUICK = {"nsamples": 4, "seqlen": 32, "eval_seqlen": 32, "eval_windows": 2}


def test_dashboard_runs_owl_with_dsnot_and_shows_both_panels(tmp_path: Path) -> None:
    dash = Dashboard(model="tiny-llama", method="wanda", sparsity="70%", runs_dir=str(tmp_path), allocation="owl",
                     refine="dsnot", **QUICK)
    assert dash.allocation_row.layout.display == "none"  # nothing run yet
    view = dash.run()
    assert view.status == "finished" and dash.allocation_row.layout.display == "flex"
    assert dash.refine_panel.layout.display == "flex"
    bars = dash.figures["allocation"].data[0]
    assert list(bars.y) == pytest.approx(view.allocation.ratios) and bars.y[0] != bars.y[1]
    assert "swaps" in dash.figures["refine"].layout.title.text
    assert dash.result_dict is not None and dash.result_dict["allocation"]["kind"] == "owl"
    figure = allocation_plot(view.run_id, runs_dir=tmp_path)  # the same chart for the stored run
    assert list(figure.data[0].y) == pytest.approx(view.allocation.ratios) and view.run_id in figure.layout.title.text
    assert "swaps" in refine_plot(tmp_path / view.run_id).layout.title.text
    dash.allocation.value, dash.refine.value = "uniform", ""
    dash.sparsity.value = "structured:30%"
    dash.method.value = "numerical"
    assert dash.run(eval_data=None).status == "finished"
    assert dash.allocation_row.layout.display == "none"  # a structured run has no per-layer sparsity to draw


def test_dashboard_bad_allocation_is_a_message(tmp_path: Path) -> None:
    dash = Dashboard(model="tiny-llama", sparsity="2:4", runs_dir=str(tmp_path), allocation="owl", **QUICK)
    dash.run()
    assert "2:4 fixes the count of every group of weights" in dash.status.value
    dash.allocation.value = "owl:x"
    dash.run()
    assert "OWL takes two numbers" in dash.status.value


def test_allocation_plot_of_a_stored_run_and_an_unfinished_one(tmp_path: Path) -> None:
    path = write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%"})
    figure = allocation_plot(path.name, runs_dir=tmp_path)  # a run from before allocation existed: uniform
    assert list(figure.data[0].y) == [0.5, 0.5] and "uniform 50.0%" in figure.layout.title.text
    assert not refine_plot(path).data  # no DSnoT: a note
    (path / "status.json").write_text(json.dumps({"status": "running"}))
    (path / "result.json").unlink()
    with pytest.raises(ToolkitError, match="pick a finished run"):
        allocation_plot(path, runs_dir=tmp_path)


def test_sweep_plot_draws_a_line_per_allocation(tmp_path: Path) -> None:
    for allocation, ppl in (("uniform", 30.0), ("owl:5,0.08", 25.0)):
        for sparsity in ("50%", "70%"):
            write_run(tmp_path, {"model": "m", "method": "wanda", "sparsity": sparsity, "eval_data": "wiki",
                                 "allocation": allocation}, ppl=ppl)
    names = [trace.name for trace in sweep_plot(model="m", runs_dir=tmp_path).data]
    assert names == ["wanda", "wanda · owl:5,0.08", "dense (20.00)"]
