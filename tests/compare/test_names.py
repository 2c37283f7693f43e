"""Runs are named by method, target, allocation and refinement; equal names are told apart by seed, then time."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.synthetic_runs import write_run
from toolkit.compare import names
from toolkit.store.runs import open_run


def test_a_run_is_named_by_method_target_allocation_and_refinement() -> None:
    config = {"method": "fista", "allocation": "owl:5,0.08", "refine": "dsnot:50"}
    assert names.config_name(config, "50%") == "FISTAPruner 50% · OWL · DSnoT"
    assert names.config_name({"method": "wanda", "allocation": "uniform", "refine": None}, "2:4") == "Wanda 2:4"
    assert names.config_name({"method": "sparsegpt", "allocation": "owl:7,0.1", "refine": "dsnot:20"}, "60%") == \
        "SparseGPT 60% · OWL M=7 λ=0.1 · DSnoT 20"
    assert names.config_name({"method": "newthing"}, "50%") == "newthing 50%"  # unknown: as stored
    assert names.config_name({"method": "fista", "allocation": "plans/ratios.json"}, "") == \
        "FISTAPruner · ratios ratios.json"


def test_the_start_time_comes_from_the_run_id() -> None:
    assert names.started("20261122-191329-wanda-50-b393") == "22 Nov 19:13"
    assert names.started("20261122-191329-wanda-50-b393", seconds=True) == "22 Nov 19:13:29"
    assert names.started("r1") == "r1"


def test_equal_names_get_the_seed_when_it_differs_else_the_time_never_a_hash(tmp_path: Path) -> None:
    runs = [open_run(write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%", "seed": s}))
            for s in (0, 1)]
    runs.append(open_run(write_run(tmp_path, {"model": "tiny-llama", "method": "fista", "sparsity": "50%",
                                               "allocation": "owl:5,0.08", "refine": "dsnot:50"})))
    assert names.run_names(runs) == ["Wanda 50% · seed 0", "Wanda 50% · seed 1", "FISTAPruner 50% · OWL · DSnoT"]
    twins = [open_run(write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%", "seed": 0}))
             for _ in range(2)]
    labelled = names.run_names(twins)
    when = names.started(twins[0].run_id, seconds=True)
    assert labelled[0].startswith(f"Wanda 50% · {when[:-3]}") and len(set(labelled)) == 2
    for label, record in zip(labelled, twins, strict=True):
        assert record.run_id[-4:] not in label  # no hash suffix
