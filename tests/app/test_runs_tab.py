"""The Runs tab replays each run kind with the panels its live run showed, at the live run's clock.

Hand-built events of every kind (pruning with a solver, structured, quantized, OWL allocation with
DSnoT refinement, recovery) are written to a run store with chosen stamps and replayed through
:func:`app.runs_tab.replay_view`, the handler's logic; a replay whose files were deleted gets one line.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from app import runs_tab
from tests.helpers.synthetic_runs import LINEARS, run_events, write_run
from toolkit.events import (
    AllocationPlanned,
    EvalPoint,
    Event,
    GlobalRanking,
    LayerDone,
    LayerStarted,
    MaskRefined,
    RecoveryStep,
    RunFinished,
    RunStarted,
    SolverStep,
    SublayerPruned,
    UnitsRemoved,
)
from toolkit.store.runs import STAMP, RunWriter

PROTOCOL = {"model_label": "tiny random llama", "calibration": {"source": "wiki", "nsamples": 4, "seqlen": 64,
                                                                "seed": 0},
            "evaluation": {"dataset": "wiki", "seqlen": 64, "windows": 4}}


def stored(root: Path, events: list[Event], times: list[float] | None = None, **config: Any) -> str:
    """A run folder holding ``events`` stamped with ``times`` (seconds; None: no stamps, an older run); its id."""
    writer = RunWriter(root, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%", **config})
    for event in events:
        writer.event(event)
    lines = [json.loads(line) for line in (writer.path / "events.jsonl").read_text().splitlines()]
    for number, line in enumerate(lines):
        line.pop(STAMP)
        if times is not None:
            line[STAMP] = times[number]
    (writer.path / "events.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    finished = isinstance(events[-1], RunFinished)
    writer.finish({"achieved_sparsity": 0.5, "ppl": {}, "dense_ppl": {}, "prune_seconds": 1.0}) if finished \
        else writer.fail("stopped", cancelled=False)
    return writer.run_id


def started(method: str, sparsity: str, **fields: Any) -> RunStarted:
    return RunStarted(**{"run_id": "r", "model": "tiny-llama", "method": method, "sparsity": sparsity,
                         "options": {}, "protocol": PROTOCOL, "num_layers": 2, "linears": list(LINEARS),
                         "device": "cpu", **fields})


def pruned(layer: int, name: str, **fields: Any) -> SublayerPruned:
    return SublayerPruned(**{"layer": layer, "name": name, "shape": [8, 16], "sparsity": 0.5, "rel_error": 0.1,
                             "rel_error_dense": math.nan, "damping": math.nan, "seconds": 0.1, **fields})


def layers(*extra: Event, **fields: Any) -> list[Event]:
    """Two layers of two linears, ``extra`` events after each layer's start."""
    events: list[Event] = []
    for layer in range(2):
        events += [LayerStarted(layer=layer, num_layers=2, groups=[]), *extra,
                   *(pruned(layer, name, **fields) for name in LINEARS),
                   LayerDone(layer=layer, num_layers=2, output_rel_error=0.1, seconds=0.2)]
    return events


def finished(**fields: Any) -> RunFinished:
    return RunFinished(**{"achieved_sparsity": 0.5, "prune_seconds": 27.9, "ppl": {"wiki": 25.0},
                          "dense_ppl": {"wiki": 20.0}, **fields})


def shown(update: dict[str, Any]) -> set[str]:
    return {name for name, show in update["visible"].items() if show}


def recovery_events(losses: list[float]) -> list[Event]:
    protocol = {**PROTOCOL, "model_label": "tiny-llama after wanda 50% (run p1)",
                "parent": {"run_id": "p1", "method": "wanda", "label": "50%", "masks": "stored"},
                "calibration": {"source": "wiki", "split": "train", "nsamples": 12, "seqlen": 32, "seed": 0}}
    options = {"parent": "p1", "steps": len(losses), "rank": 8, "alpha": 16, "lr": 1e-4, "batch_size": 4,
               "trainable": 1234}
    return [started("recover", "50%", options=options, protocol=protocol),
            EvalPoint(dataset="wiki", which="pruned", ppl=40.0, seq_len=64, windows=4, tokens=256),
            *(RecoveryStep(step=i + 1, loss=loss, lr=1e-4) for i, loss in enumerate(losses)),
            EvalPoint(dataset="wiki", which="recovered", ppl=30.0, seq_len=64, windows=4, tokens=256),
            finished(ppl={"wiki": 30.0})]


# -- each kind shows its own panels -------------------------------------------------------------------------
def test_a_recovery_replays_its_loss_curve_perplexities_training_data_and_parent(tmp_path: Path) -> None:
    losses = [4.0, 3.5, 3.25]
    events = recovery_events(losses)
    run_id = stored(tmp_path, events, [0.5 + i for i in range(len(events) - 1)] + [43.5], method="recover")
    update = runs_tab.replay_view(run_id, str(tmp_path))
    assert shown(update) == {"loss"}  # no heat-map, no layers, no allocation: nothing of a pruning run
    curve = update["loss"].data[0]
    assert list(curve.y) == losses and list(curve.x) == [1, 2, 3]
    assert "40.000 → 30.000" in update["loss"].layout.title.text
    status, result = update["status"], update["result"]
    assert "✓ finished · recover run p1 (50%) · step 3 of 3" in status and "elapsed 43.0 s" in status
    assert "layers" not in status and "pruned" not in status
    assert "| perplexity (wiki, 4 × 64 tokens) | 40.000 | 30.000 | -25.0% |" in result
    assert "| training time | | 27.9 s | |" in result and "| loss (step 1 → 3) | 4.0000 | 3.2500 | |" in result
    assert "Training data: 12 × 32 tokens of wiki" in result and "rank 8" in result
    assert "prune time" not in result and "Calibration" not in result
    assert update["parent"] == "p1" and "recovers run `p1` (wanda 50%" in result


def test_a_solver_run_shows_its_heatmap_layers_solver_and_lambda_only(tmp_path: Path) -> None:
    update = runs_tab.replay_view(stored(tmp_path, run_events("r", 2)), str(tmp_path))
    assert shown(update) == {"heatmap", "layers", "solver", "lambda", "allocation"}
    assert "4 of 4 linears" in update["heatmap"].layout.title.text and update["parent"] == ""


def test_a_structured_run_shows_kept_units_ranking_and_newton_steps(tmp_path: Path) -> None:
    ranking = GlobalRanking(method="numerical", allocation="param_weighted", ratio=0.3, achieved_ratio=0.3,
                            threshold=0.5, scores=[0.1, 0.9], heads_removed=1, heads_total=4, channels_removed=2,
                            channels_total=8, params_removed=30, params_total=100, candidates=12,
                            head_ranks=[0, 5], head_values=[0.1, 0.9], channel_ranks=[1, 2], channel_values=[0.2, 0.3])
    newton = [SolverStep(layer=0, name="self_attn.o_proj", solver="newton", step=k, objective=4.0 - k)
              for k in range(3)]
    kept = UnitsRemoved(layer=0, unit="heads", kept=3, removed=1, params_before=40, params_after=30, rel_error=0.1,
                        rel_error_uncompensated=0.2, kept_map="1101")
    events = [started("numerical", "structured:30%"), *newton, ranking, *layers(kept), finished()]
    update = runs_tab.replay_view(stored(tmp_path, events, method="numerical"), str(tmp_path))
    assert shown(update) == {"heatmap", "layers", "solver", "ranking", "kept"}
    assert [list(trace.y) for trace in update["solver"].data] == [[4.0, 3.0, 2.0]]
    assert update["ranking"].layout.shapes[0].y0 == 0.5 and update["kept"].data


def test_a_quantized_run_shows_bits_and_its_projection_trace_not_an_allocation(tmp_path: Path) -> None:
    trace = [SolverStep(layer=1, name=LINEARS[1], solver="awp", step=k, objective=1.0 / (k + 1),
                        values={"proj_dist": 0.1 / (k + 1), "sparsity": 0.0, "bits": 4.0}) for k in range(3)]
    events = [started("awp", "int4:g128"), *layers(bits=4.25, sparsity=0.0), *trace,
              finished(bits_per_weight=4.25, params_before=512, params_after=512, achieved_sparsity=0.0)]
    update = runs_tab.replay_view(stored(tmp_path, events, method="awp", sparsity="int4:g128"), str(tmp_path))
    assert shown(update) == {"heatmap", "layers", "solver", "lambda"}
    assert "| bits per weight (scales counted) | | 4.250 |" in update["result"]
    assert len(update["lambda"].data) == 3  # AWP's projection trace: distance, sparsity, bits


def test_an_owl_run_with_dsnot_shows_its_layer_sparsity_lod_and_refinement(tmp_path: Path) -> None:
    plan = AllocationPlanned(allocation="owl:5,0.08", ratios=[0.45, 0.55], outlier_ratios=[0.09, 0.02], total=0.5,
                             seconds=1.0)
    refined = MaskRefined(layer=0, name=LINEARS[0], swaps=12, cycles=3, expected_error_before=0.2,
                          expected_error_after=0.1, rel_error_before=0.3, rel_error_after=0.25)
    events = [started("wanda", "50%"), plan, *layers(refined), finished()]
    update = runs_tab.replay_view(stored(tmp_path, events), str(tmp_path))
    assert shown(update) == {"heatmap", "layers", "allocation", "refine"}
    bars, lod = update["allocation"].data[:2]
    assert list(bars.y) == [0.45, 0.55] and list(lod.y) == [0.09, 0.02]
    assert "24 swaps in 2 linears" in update["refine"].layout.title.text


# -- the elapsed time is the live run's -----------------------------------------------------------------------
def test_elapsed_is_the_time_between_the_stamps_not_the_prune_time(tmp_path: Path) -> None:
    events = run_events("r", 2)
    times = [10.0 + i * 0.25 for i in range(len(events) - 1)] + [53.0]  # RunStarted at 10 s, RunFinished at 53 s
    update = runs_tab.replay_view(stored(tmp_path, events, times), str(tmp_path))
    assert "elapsed 43.0 s" in update["status"] and "✓ finished" in update["status"]


def test_an_interrupted_run_counts_to_its_last_event(tmp_path: Path) -> None:
    events = run_events("r", 2, finished=False)
    update = runs_tab.replay_view(stored(tmp_path, events, [2.0 + i for i in range(len(events))]), str(tmp_path))
    assert f"elapsed {len(events) - 1:.1f} s" in update["status"]


def test_an_older_run_without_stamps_says_its_elapsed_time_was_not_recorded(tmp_path: Path) -> None:
    update = runs_tab.replay_view(stored(tmp_path, run_events("r", 2), None), str(tmp_path))
    assert "elapsed not recorded (an older run)" in update["status"]


# -- bad input: one line, nothing else ------------------------------------------------------------------------
def test_a_run_deleted_after_the_listing_is_one_line(tmp_path: Path) -> None:
    path = write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%"})
    assert runs_tab.runs_table(str(tmp_path))["choices"] == [path.name]
    shutil.rmtree(path)
    update = runs_tab.replay_view(path.name, str(tmp_path))
    assert update["status"].count("\n") == 0 and update["status"].startswith("**⚠") and "deleted" in update["status"]
    assert not shown(update) and "notice" not in update  # the line only: no toast, no panels of an earlier run


def test_a_run_deleted_while_it_is_opened_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%"})
    real = runs_tab.open_run

    def open_then_delete(folder: Path) -> Any:
        record = real(folder)
        shutil.rmtree(folder)
        return record

    monkeypatch.setattr(runs_tab, "open_run", open_then_delete)
    update = runs_tab.replay_view(path.name, str(tmp_path))
    assert update["status"] == (f"**⚠ run {path.name} cannot be replayed: its files were deleted; press Refresh or "
                                "pick another run**")
    assert not shown(update)


@pytest.mark.parametrize("status", ["finished", "failed"])
def test_a_run_without_events_jsonl_is_one_line(tmp_path: Path, status: str) -> None:
    path = write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%"})
    (path / "events.jsonl").unlink()
    if status == "failed":
        (path / "status.json").write_text(json.dumps({"status": "failed", "error": "x", "pid": 1}))
    update = runs_tab.replay_view(path.name, str(tmp_path))
    assert "events.jsonl is missing (deleted?)" in update["status"] and update["status"].count("\n") == 0
    assert not shown(update)


def test_a_truncated_events_jsonl_replays_what_it_holds(tmp_path: Path) -> None:
    path = write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%"})
    text = (path / "events.jsonl").read_text()
    (path / "events.jsonl").write_text(text[: len(text) * 2 // 3])  # cut inside a line
    update = runs_tab.replay_view(path.name, str(tmp_path))
    assert update["status"].startswith("**⚠ damaged: events.jsonl ends with")
    assert "unreadable" in update["warnings"] and "heatmap" in shown(update)


def test_the_recovery_method_name_is_the_run_stores() -> None:
    from toolkit.run.recover_config import METHOD

    assert runs_tab.RECOVER == METHOD


def test_an_interrupted_recovery_replays_the_steps_it_made(tmp_path: Path) -> None:
    events = recovery_events([4.0, 3.5, 3.25, 3.0])[:4]  # RunStarted, before, two steps: then the process died
    run_id = stored(tmp_path, events, [0.5, 300.0, 700.0, 1240.0], method="recover")
    (tmp_path / run_id / "status.json").write_text(json.dumps({"status": "running", "error": "", "pid": 2**40}))
    update = runs_tab.replay_view(run_id, str(tmp_path))
    assert update["status"].startswith("**⚠ interrupted · recover run p1 (50%) · step 2 of 4")
    assert "elapsed 20 min 40 s" in update["status"] and list(update["loss"].data[0].y) == [4.0, 3.5]
    assert update["result"].startswith("No result: the recovery was interrupted")


# -- the table names runs as Compare does; a recovery's time is its training time -----------------------------
def test_the_table_names_runs_by_method_target_allocation_and_refinement(tmp_path: Path) -> None:
    owl = write_run(tmp_path, {"model": "tiny-llama", "method": "fista", "sparsity": "50%", "allocation": "owl:5,0.08",
                               "refine": "dsnot:50"})
    seeds = [write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "60%", "seed": seed})
             for seed in (0, 1)]
    other = write_run(tmp_path, {"model": "smollm2-135m", "method": "wanda", "sparsity": "60%", "seed": 0})
    table = runs_tab.runs_table(str(tmp_path))
    rows = {row[runs_tab.COLUMNS.index("run id")]: dict(zip(runs_tab.COLUMNS, row, strict=True))
            for row in table["rows"]}
    assert rows[owl.name]["run"] == "FISTAPruner 50% · OWL · DSnoT"
    assert [rows[path.name]["run"] for path in seeds] == ["Wanda 60% · seed 0", "Wanda 60% · seed 1"]
    assert rows[other.name]["run"] == "Wanda 60%"  # another model: its own name, told apart by the model column
    assert rows[owl.name]["prune s"] == 1.5 and rows[owl.name]["training s"] is None
    assert sorted(table["choices"]) == sorted(rows)  # the picker still takes run ids
    assert not any(row["run"].endswith(row["run id"][-4:]) for row in rows.values())  # no hash suffix


def test_a_recovery_row_shows_its_training_time_not_as_prune_time(tmp_path: Path) -> None:
    events = recovery_events([4.0, 3.5])
    run_id = stored(tmp_path, events, [float(i) for i in range(len(events))], method="recover", sparsity="50%")
    (row,) = runs_tab.runs_table(str(tmp_path))["rows"]
    named = dict(zip(runs_tab.COLUMNS, row, strict=True))
    assert named["run id"] == run_id and named["run"] == "recover 50%"
    assert named["training s"] == 1.0 and named["prune s"] is None  # result.json's prune_seconds of a recovery


# -- a replay shows the Run tab's result card -----------------------------------------------------------------
def test_a_replayed_pruning_run_shows_the_run_tabs_result_card(tmp_path: Path) -> None:
    events = run_events("r", 2)
    times = [10.0 + i * 0.25 for i in range(len(events) - 1)] + [53.0]
    update = runs_tab.replay_view(stored(tmp_path, events, times), str(tmp_path))
    text = update["card"]
    assert "| perplexity (wiki, 4 × 64 tokens) |" in text and "**20.00 → 25.00 (+25%)**" in text
    assert "| 43.0 s (pruning 1.5 s) |" in text and "*This run was recorded before" in text
    assert "ppl 20.00 → 25.00 (+25%) · 43.0 s" in update["status"]  # the card and the status line agree


def test_an_unstamped_replay_says_its_prune_time_as_prune_time_in_the_card_and_the_status(tmp_path: Path) -> None:
    update = runs_tab.replay_view(stored(tmp_path, run_events("r", 2), None), str(tmp_path))
    assert "elapsed not recorded (an older run)" in update["status"]
    assert "· pruning 1.5 s" in update["status"] and "· 1.5 s" not in update["status"]
    assert "| pruning 1.5 s (elapsed not recorded) |" in update["card"]


def test_no_card_for_a_recovery_an_unfinished_run_or_a_refused_replay(tmp_path: Path) -> None:
    events = recovery_events([4.0])
    recovery = stored(tmp_path, events, [float(i) for i in range(len(events))], method="recover")
    stopped = run_events("r", 2, finished=False)
    unfinished = stored(tmp_path, stopped, [float(i) for i in range(len(stopped))])
    for run_id in (recovery, unfinished, "no-such-run"):
        assert runs_tab.replay_view(run_id, str(tmp_path))["card"] == ""  # nothing of an earlier replay stays
