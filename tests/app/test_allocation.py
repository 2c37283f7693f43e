"""The Run form's layer allocation (uniform / OWL / custom table) and DSnoT refinement, the Runs-tab replay of an
OWL run, and sweeps over allocations: the app driven through its handlers (tiny-llama runs, synthetic stores).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app import allocation_form as af
from app import allocation_panel, forms, runs_tab, sweep_tab
from app.run_tab import run_stream
from tests.helpers.synthetic_runs import write_run
from toolkit.api import RunConfig, list_runs
from toolkit.spec.targets import NM, Unstructured

QUICK = forms.Protocol(nsamples=4, seqlen=32, eval_seqlen=32, eval_windows=2, device="cpu")
OWL_RESULT = {"kind": "owl", "label": "owl:5,0.08", "ratios": [0.78, 0.62], "outlier_ratios": [0.008, 0.009],
              "layer_weights": [36864, 36864], "total": 0.7}


def settings(**fields: object) -> forms.RunSettings:
    return forms.RunSettings(**{"model": "tiny-llama", "method": "wanda", "protocol": QUICK, **fields})


def choose(**fields: object) -> af.AllocationSettings:
    return af.AllocationSettings(**fields)  # type: ignore[arg-type]


def stored(root: Path, allocation: dict | None = OWL_RESULT, sparsity: float = 0.7) -> Path:
    """A finished tiny-llama run whose result.json has per-layer records (and an allocation when given)."""
    path = write_run(root, {"model": "tiny-llama", "method": "wanda", "sparsity": f"{sparsity:.0%}"})
    result = json.loads((path / "result.json").read_text())
    result.update(compression={"label": f"{sparsity:.0%}", "kind": "unstructured",
                               "sparsity": {"kind": "unstructured", "fraction": sparsity}},
                  layers=[{"layer": layer, "name": "q", "shape": [192, 192], "params_before": 36864}
                          for layer in range(2)])
    if allocation is not None:
        result["allocation"] = allocation
    (path / "result.json").write_text(json.dumps(result))
    return path


# -- the form into a RunConfig ---------------------------------------------------------------------
def test_owl_and_dsnot_choices_become_the_config() -> None:
    config = forms.to_config(settings(percent=70, allocation=choose(choice="OWL", owl_m=7, owl_lambda=0.1,
                                                                     refine="DSnoT", cycles=20.0)), "runs")
    assert config.to_dict()["allocation"] == "owl:7,0.1" and config.to_dict()["refine"] == "dsnot:20"
    plain = forms.to_config(settings(), "runs")  # the defaults: uniform, no refinement, the reuse key of old runs
    assert "allocation" not in plain.reuse_key() and "refine" not in plain.reuse_key()


def test_custom_table_is_the_ratio_file_the_cli_takes(tmp_path: Path) -> None:
    table = [[0, 0.78, 36864], [1, 0.62, 36864]]
    config = forms.to_config(settings(percent=70, allocation=choose(choice="custom", table=table)), str(tmp_path))
    path = Path(config.to_dict()["allocation"])
    assert path.parent == tmp_path and json.loads(path.read_text()) == {"layers": [0.78, 0.62]}
    cli = RunConfig(model="tiny-llama", method="wanda", sparsity=Unstructured(0.7), allocation=str(path),
                    out_dir=str(tmp_path))
    assert cli.reuse_key()["allocation"] == config.reuse_key()["allocation"]  # the CLI finds the app's run
    second = forms.to_config(settings(percent=70, allocation=choose(choice="custom", table=table)), str(tmp_path))
    assert second.to_dict()["allocation"] == str(path) and len(list(tmp_path.iterdir())) == 1  # same table, same file
    assert list_runs(tmp_path) == []  # a file in the store is not a run


BAD_TOTAL = ("the custom ratios table: the ratios give a total sparsity of 0.7000 (weighted by each layer's "
             "weights), --sparsity is 0.6000: they differ by +0.1000")
BAD_TOTAL_ON_THE_PAGE = BAD_TOTAL.replace("--sparsity is 0.6000", '"Sparsity (%)" is 60 %')


@pytest.mark.parametrize(("fields", "message"), [
    ({"pattern": "n:m", "allocation": choose(choice="OWL")}, "2:4 fixes the count of every group of weights"),
    ({"method": "flap", "pattern": "structured", "percent": 20, "allocation": choose(choice="OWL")},
     'flap plans its own per-layer removal: drop "Layer allocation"'),
    ({"method": "rtn", "pattern": "none", "quant": "int4", "allocation": choose(choice="OWL")},
     'rtn quantizes only and prunes nothing: drop "Layer allocation"'),
    ({"percent": 60, "allocation": choose(choice="custom", table=[[0, 0.78, 36864], [1, 0.62, 36864]])},
     BAD_TOTAL_ON_THE_PAGE),
    ({"allocation": choose(choice="custom", table=[])}, "the custom ratios table is empty"),
    ({"allocation": choose(choice="custom", table=[[0, "most", None]])}, "layer 0's sparsity must be a number"),
    ({"allocation": choose(choice="OWL", owl_lambda=0.7)}, "λ must be in [0, 0.5)"),
    ({"allocation": choose(refine="DSnoT", cycles=0)}, "DSnoT cycles must be a whole number ≥ 1"),
    ({"method": "awp", "quant": "int4", "allocation": choose(refine="DSnoT")}, 'with "Quantization" the codes'),
])
def test_bad_choices_are_one_line_in_the_status(tmp_path: Path, fields: dict, message: str) -> None:
    (update,) = list(run_stream(settings(**fields), runs_dir=str(tmp_path), session="alloc-bad"))
    assert update["status"].startswith("**⚠") and message in update["status"] and "notice" not in update
    assert "\n" not in update["status"] and "--" not in update["status"]  # one line, in the page's words
    assert not list(tmp_path.iterdir())  # nothing run, no ratio file written


# -- the custom table's handlers -------------------------------------------------------------------
def test_total_line_weighted_plain_and_refused() -> None:
    weighted = af.total_line([[0, 0.8, 300], [1, 0.5, 100]], Unstructured(0.725))
    assert "total **72.50%** (weighted by each layer's weights)" in weighted and "✓" in weighted
    plain = af.total_line([[0, 0.8, None], [1, 0.6, None]], Unstructured(0.7))
    assert "plain mean" in plain and "✓" in plain
    refused = af.total_line([[0, 0.8, None], [1, 0.7, None]], Unstructured(0.7))
    assert refused.startswith("⚠ the custom ratios table: the ratios give a total sparsity of 0.7500")
    assert "pick the unstructured pattern" in af.total_line([[0, 0.5, None]], NM(2, 4))
    assert allocation_panel.on_total([], "unstructured", 50, "2:4") == allocation_panel.NO_TABLE
    assert "outside [0, 1)" in allocation_panel.on_total([[0, 1.5, None]], "unstructured", 50, "2:4")


def test_export_writes_the_ratio_file_or_says_why_not(tmp_path: Path) -> None:
    table = [[0, 0.78, 36864], [1, 0.62, 36864]]
    done = allocation_panel.on_export(table, "unstructured", 70, "2:4", str(tmp_path))
    assert json.loads(Path(done["file"]).read_text()) == {"layers": [0.78, 0.62]}
    (kept,) = tmp_path.iterdir()  # the run uses this same file
    assert kept.name == Path(done["file"]).name
    assert "differ by +0.1000" in allocation_panel.on_export(table, "unstructured", 60, "2:4", str(tmp_path))["notice"]
    assert "unstructured pattern" in allocation_panel.on_export(table, "n:m", 70, "2:4", str(tmp_path))["notice"]


def test_choosing_custom_fills_the_table_from_this_tabs_last_run(tmp_path: Path) -> None:
    older = stored(tmp_path, None, sparsity=0.5)  # a uniform run: its target in every layer
    newest = stored(tmp_path)
    update = allocation_panel.on_choice("custom", [], [older.name, newest.name], str(tmp_path))
    assert update["custom"] and not update["owl"] and update["source"] == newest.name
    assert update["table"] == [[0, 0.78, 36864], [1, 0.62, 36864]] and update["percent"] == 70.0
    mine = allocation_panel.on_choice("custom", [], [older.name], str(tmp_path))
    assert mine["table"] == [[0, 0.5, 36864], [1, 0.5, 36864]] and mine["percent"] == 50.0
    edited = [[0, 0.9, None]]
    assert "table" not in allocation_panel.on_choice("custom", edited, [older.name], str(tmp_path))  # kept
    assert allocation_panel.on_choice("OWL", [], [], str(tmp_path)) == {"owl": True, "custom": False}
    assert af.uniform_rows(update["table"], 60) == [[0, 0.6, 36864], [1, 0.6, 36864]]


def test_filling_from_a_run_without_per_layer_sparsity_is_a_notice(tmp_path: Path) -> None:
    path = stored(tmp_path, None)
    result = json.loads((path / "result.json").read_text())
    result["compression"] = {"label": "structured:30%", "sparsity": {"kind": "structured", "fraction": 0.3}}
    (path / "result.json").write_text(json.dumps(result))
    assert "has no per-layer sparsity" in allocation_panel.on_source(path.name, str(tmp_path))["notice"]


# -- a run, its replay, a sweep (tiny-llama) --------------------------------------------------------
def test_an_owl_dsnot_run_draws_its_allocation_and_refinement(tmp_path: Path) -> None:
    updates = list(run_stream(settings(percent=70, allocation=choose(choice="OWL", refine="DSnoT")),
                              runs_dir=str(tmp_path), session="alloc-run"))
    final = updates[-1]
    assert "✓ finished" in final["status"] and final["visible"]["refine"]
    bars = final["allocation"].data[0]
    assert len(bars.y) == 2 and bars.y[0] != bars.y[1]  # OWL moved the layers apart
    assert sum(bars.y) / 2 == pytest.approx(0.7) and "owl:5,0.08" in final["allocation"].layout.title.text
    assert final["refine"].data and "swaps" in final["refine"].layout.title.text
    (record,) = list_runs(tmp_path)
    replay = runs_tab.replay_view(record.run_id, str(tmp_path))  # the Runs tab draws the same panels
    assert list(replay["allocation"].data[0].y) == list(bars.y) and replay["refine"].data
    rows, percent = af.table_from_run(record.run_id, str(tmp_path))  # and the custom table starts from it
    assert [row[1] for row in rows] == pytest.approx(list(bars.y), abs=1e-4) and percent == 70.0


def test_sweep_runs_each_sparsity_with_each_allocation(tmp_path: Path) -> None:
    base = RunConfig(model="tiny-llama", method="wanda", sparsity=Unstructured(0.5), nsamples=4, seqlen=32,
                     eval_seqlen=32, eval_windows=2, device="cpu", out_dir=str(tmp_path))
    for sparsity in ("50%", "2:4"):  # stored before allocation existed: no allocation or refine in config.json
        old = {k: v for k, v in base.to_dict().items() if k not in ("allocation", "refine")}
        write_run(tmp_path, {**old, "sparsity": sparsity, "eval_dense": True})
    sweep = sweep_tab.SweepSettings(model="tiny-llama", methods=["wanda"], sparsities=["50%", "2:4"],
                                    allocations=["uniform", "OWL"], protocol=QUICK)
    configs, skipped = sweep_tab.sweep_configs(sweep, str(tmp_path))
    assert [(str(c.sparsity), c.to_dict()["allocation"]) for c in configs] == [("50%", "uniform"),
                                                                                ("50%", "owl:5,0.08"),
                                                                                ("2:4", "uniform")]
    assert len(skipped) == 1 and "2:4 (owl:5,0.08)" in skipped[0]
    final = list(sweep_tab.sweep_stream(sweep, runs_dir=str(tmp_path), session="alloc-sweep"))[-1]
    assert "3 of 3 points** (2 reused" in final["status"] and "skipped: wanda 2:4 (owl" in final["status"]
    names = [trace.name for trace in final["curve"].data]
    assert names[:3] == ["wanda", "wanda (n:m)", "wanda · owl:5,0.08"] and "dense" in names[-1]
    assert final["curve"].data[2].line.dash == "dash"
    column = sweep_tab.COLUMNS.index("allocation")
    assert sorted(row[column] for row in final["table"]) == ["owl:5,0.08", "uniform", "uniform"]


def test_sweep_needs_an_allocation() -> None:
    (update,) = list(sweep_tab.sweep_stream(sweep_tab.SweepSettings(allocations=[]), runs_dir="runs"))
    assert "at least one allocation" in update["status"]
