"""The Sweep tab's "Permute inputs (n:m)" choice: off / on / both reach the n:m runs' configs, a sweep without
n:m is refused with the command line's rule before anything runs, and a permuted point is labelled as such in the
table, the CSV, the curve and the run store's frontier (the app driven through its handlers, tiny-llama runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app import forms, frontier_view, sweep_tab
from toolkit.errors import ToolkitError
from toolkit.figures.sweep import sweep_figure
from toolkit.run.config import RunConfig
from toolkit.spec.targets import NM, Unstructured
from toolkit.store.runs import list_runs
from toolkit.sweep import COLUMNS, plan, stored_points

QUICK = forms.Protocol(nsamples=4, seqlen=32, eval_seqlen=32, eval_windows=2, device="cpu")


def sweep(**fields: Any) -> sweep_tab.SweepSettings:
    return sweep_tab.SweepSettings(**{"model": "tiny-llama", "methods": ["wanda"], "sparsities": ["50%", "2:4"],
                                      "protocol": QUICK, **fields})


def _specs(settings: sweep_tab.SweepSettings, root: Path) -> list[tuple[str, str, bool]]:
    configs, _ = sweep_tab.sweep_configs(settings, str(root))
    return [(c.method, c.compression.label, c.permute) for c in configs]


def test_each_choice_reaches_the_configs_of_the_nm_runs_only(tmp_path: Path) -> None:
    assert _specs(sweep(), tmp_path) == [("wanda", "50%", False), ("wanda", "2:4", False)]
    assert _specs(sweep(permute="on"), tmp_path) == [("wanda", "50%", False), ("wanda", "2:4+perm", True)]
    assert _specs(sweep(permute="both", sparsities=["2:4", "30%", "4:8"], methods=["magnitude", "sparsegpt"]),
                  tmp_path) == [("magnitude", "2:4", False), ("magnitude", "2:4+perm", True),
                                ("magnitude", "30%", False), ("magnitude", "4:8", False),
                                ("magnitude", "4:8+perm", True), ("sparsegpt", "2:4", False),
                                ("sparsegpt", "2:4+perm", True), ("sparsegpt", "30%", False),
                                ("sparsegpt", "4:8", False), ("sparsegpt", "4:8+perm", True)]


def test_a_permuted_pair_the_method_cannot_run_is_a_skip_note_with_the_run_configs_reason(tmp_path: Path) -> None:
    configs, notes = sweep_tab.sweep_configs(sweep(permute="on", sparsities=["2:4"], bits=["none", "int4"],
                                                   methods=["sparsegpt"]), str(tmp_path))
    assert [(c.compression.label, c.permute) for c in configs] == [("2:4+perm", True)]
    with pytest.raises(ToolkitError) as cli:
        RunConfig(model="tiny-llama", method="sparsegpt", sparsity="2:4", quant="int4", permute=True)
    assert notes == [f"sparsegpt 2:4+int4:g128+perm: {cli.value}"]


def test_plan_reads_the_permuted_label_and_refuses_it_without_nm(tmp_path: Path) -> None:
    base = RunConfig(model="tiny-llama", method="magnitude", sparsity=Unstructured(0.5), out_dir=str(tmp_path))
    configs, _ = plan(base, ["wanda"], ["2:4+perm", "2:4"])
    assert [(c.sparsity, c.permute) for c in configs] == [(NM(2, 4), True), (NM(2, 4), False)]
    with pytest.raises(ToolkitError) as refused:
        plan(base, ["wanda"], ["50%+perm"])
    with pytest.raises(ToolkitError) as cli:
        RunConfig(model="tiny-llama", method="wanda", sparsity="50%", permute=True)
    assert str(refused.value) == str(cli.value) and "--permute" in str(refused.value)


@pytest.mark.parametrize("choice", ["on", "both"])
def test_permute_without_an_nm_sparsity_is_one_line_before_any_run(tmp_path: Path, choice: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep_tab, "device_queue", lambda *a: pytest.fail("a refused sweep reached the queue"))
    settings = sweep(permute=choice, sparsities=["30%", "50%"])
    (update,) = sweep_tab.sweep_stream(settings, runs_dir=str(tmp_path), session=f"perm-{choice}")
    status = update["status"]
    assert status == ('**⚠ "Permute inputs (n:m)" spreads the important inputs over the groups of n:m sparsity; '
                      'the sweep\'s sparsities (30%, 50%) have none: tick 2:4 or 4:8, or set "Permute inputs (n:m)" '
                      'to off**')
    assert "\n" not in status and update["estimate"] == status
    assert sweep_tab.estimate_line(settings, str(tmp_path)) == status
    assert not list(tmp_path.iterdir())


def test_an_unknown_choice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ToolkitError, match="unknown permute choice 'sometimes': pick off, on, both"):
        sweep_tab.sweep_configs(sweep(permute="sometimes"), str(tmp_path))


def test_the_curve_draws_a_permuted_point_apart() -> None:
    points = [{"method": "wanda", "sparsity": "2:4", "pattern": "nm", "achieved_sparsity": 0.5, "ppl": 40.0},
              {"method": "wanda", "sparsity": "2:4+perm", "pattern": "nm", "achieved_sparsity": 0.5, "ppl": 35.0,
               "permute": True}]
    plain, permuted = sweep_figure(points).data
    assert plain.name == "wanda (n:m)" and permuted.name == "wanda (n:m, permuted)"
    assert plain.marker.symbol != permuted.marker.symbol and list(permuted.text) == ["2:4+perm"]


def test_a_sweep_with_both_labels_the_permuted_run_everywhere(tmp_path: Path) -> None:
    final = list(sweep_tab.sweep_stream(sweep(sparsities=["2:4"], permute="both"), runs_dir=str(tmp_path),
                                        session="perm-both"))[-1]
    assert "sweep done" in final["status"] and "2 of 2 points" in final["status"], final["status"]
    rows = [dict(zip(COLUMNS, row, strict=True)) for row in final["table"]]
    assert {(row["sparsity"], row["permute"], row["status"]) for row in rows} == {("2:4", False, "finished"),
                                                                                 ("2:4+perm", True, "finished")}
    assert all(abs(row["achieved_sparsity"] - 0.5) < 1e-3 for row in rows)
    header, *lines = Path(final["csv"]).read_text().splitlines()
    assert "permute" in header.split(",") and len(lines) == 2
    assert {trace.name for trace in final["curve"].data} >= {"wanda (n:m)", "wanda (n:m, permuted)"}
    records = list_runs(tmp_path)
    assert sorted(bool(r.config.get("permute")) for r in records) == [False, True]
    assert sorted(p.sparsity for p in stored_points(records)) == ["2:4", "2:4+perm"]
    assert [p.permute for p in stored_points(records) if p.sparsity == "2:4+perm"] == [True]
    _, summary = frontier_view.frontier_view(str(tmp_path))
    assert "wanda 2:4+perm" in summary and "wanda 2:4 " in summary
    again = list(sweep_tab.sweep_stream(sweep(sparsities=["2:4"], permute="on"), runs_dir=str(tmp_path),
                                        session="perm-again"))[-1]
    (row,) = [dict(zip(COLUMNS, row, strict=True)) for row in again["table"]]
    assert row["sparsity"] == "2:4+perm" and row["reused"] is True  # the permuted run, not the plain one


def test_the_tab_offers_the_choice_and_explains_the_open_diamond(tmp_path: Path) -> None:
    from app.app import build_app

    demo = build_app(default_model="tiny-llama", runs_dir=str(tmp_path))
    blocks = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    radio = blocks["sweep-permute"]
    assert [choice[1] for choice in radio.choices] == ["off", "on", "both"] and radio.value == "off"
    assert radio.label == forms.PERMUTE_LABEL
    assert "open diamond" in blocks["howto-sweep-sweep"].value
