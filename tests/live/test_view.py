"""The RunView reducer: events in, plain dashboard state out (synthetic events, no torch)."""

from __future__ import annotations

import math

from tests.helpers.synthetic_runs import LINEARS, run_events
from toolkit.events import LayerStarted, RunFailed, SublayerPruned
from toolkit.live.phase import format_seconds, progress_line
from toolkit.live.view import RunView, error_matrix, fold, settle, trace_for, traced_linears


def test_fold_complete_run() -> None:
    view = fold(run_events("abc", layers=2))
    assert view.status == "finished" and view.run_id == "abc" and view.method == "fista"
    assert view.num_layers == 2 and view.linears == LINEARS
    assert len(view.pruned) == 4 and len(view.layers_done) == 2
    assert view.fraction_done == 1.0
    assert view.dense_ppl == {"wiki": 20.0} and view.ppl == {"wiki": 25.0}
    assert view.achieved_sparsity == 0.5 and view.prune_seconds == 1.5
    assert view.warnings == ["layer 0 mlp.down_proj: damping raised to 0.1"]
    assert view.model_label == "tiny random llama"


def test_traces_keep_only_the_current_linear() -> None:
    view = fold(run_events(layers=2))
    assert (view.solver.layer, view.solver.name) == (1, "mlp.down_proj")
    assert len(view.solver.steps) == 6  # 2 rounds × 3 iterations of the last linear only
    assert [s.round for s in view.lambdas.steps] == [0, 1]
    assert len(view.blocks.steps) == 1
    assert view.solver.label == "layer 1 · mlp.down_proj"


def test_heatmap_matrix_fills_in_place() -> None:
    events = run_events(layers=3)
    view = RunView()
    for event in events[:4]:  # RunStarted, dense EvalPoint, LayerStarted, first SolverStep
        view.apply(event)
    matrix, columns = view.heatmap_matrix()
    assert columns == LINEARS and len(matrix) == 3
    assert all(math.isnan(v) for row in matrix for v in row)
    first = next(e for e in events if isinstance(e, SublayerPruned))
    view.apply(first)
    matrix, _ = view.heatmap_matrix()
    assert matrix[0][0] == first.rel_error and math.isnan(matrix[0][1]) and math.isnan(matrix[2][0])


def test_error_matrix_adds_unknown_linears_and_layers() -> None:
    event = SublayerPruned(layer=4, name="fc9", shape=[2, 2], sparsity=0.5, rel_error=0.3, rel_error_dense=math.nan,
                           damping=math.nan, seconds=0.0)
    matrix, columns = error_matrix([event], num_layers=2, linears=["a"])
    assert columns == ["a", "fc9"] and len(matrix) == 5 and matrix[4][1] == 0.3


def test_progress_eta_and_elapsed_use_the_consumer_clock() -> None:
    events = run_events(layers=2, finished=False)
    view = RunView()
    view.apply(events[0], now=100.0)
    view.apply(events[2], now=101.0)  # first LayerStarted: pruning starts
    pruned = [e for e in events if isinstance(e, SublayerPruned)]
    view.apply(pruned[0], now=103.0)
    assert view.fraction_done == 0.25
    assert view.elapsed(104.0) == 4.0
    assert view.eta(105.0) == 12.0  # 4 s for a quarter → 12 s left
    line = progress_line(view, 105.0)
    assert line.startswith("pruning layer 0 · 0 of 2 layers done · ") and "25% of linears" in line
    assert "elapsed 5.0 s" in line and "12 s left" in line


def test_failures_and_cancellation() -> None:
    view = fold([*run_events(finished=False)[:5], RunFailed(error="cancelled", cancelled=True)])
    assert view.status == "cancelled" and view.error == "cancelled"
    assert math.isnan(view.eta(0.0))
    view = fold([run_events()[0], RunFailed(error="boom", cancelled=False)])
    assert view.status == "failed" and "failed" in progress_line(view, 0.0)


def test_bad_events_become_warnings_not_exceptions() -> None:
    events = [run_events()[0], LayerStarted(layer="x", num_layers=None, groups=[])]  # type: ignore[arg-type]
    view = fold(events)
    assert view.status == "running"
    assert view.warnings and "unreadable" in view.warnings[0]


def test_settle_replay_with_the_store_status() -> None:
    view = settle(fold(run_events(finished=False)), "interrupted")
    assert view.status == "interrupted" and view.error == "interrupted"  # the word the run store uses
    assert settle(fold(run_events(finished=False)), "damaged").status == "failed"
    assert settle(fold(run_events()), "failed").status == "finished"


def test_trace_for_and_traced_linears() -> None:
    events = run_events(layers=2)
    assert traced_linears(events) == [(0, LINEARS[0]), (0, LINEARS[1]), (1, LINEARS[0]), (1, LINEARS[1])]
    view = trace_for(events, 0, LINEARS[0])
    assert view.solver.label == f"layer 0 · {LINEARS[0]}" and len(view.lambdas.steps) == 2


def test_format_seconds() -> None:
    assert format_seconds(math.nan) == "–"
    assert format_seconds(4.24) == "4 s" and format_seconds(4.24, tenths=True) == "4.2 s"
    assert format_seconds(185) == "3 min 05 s" and format_seconds(3720) == "1 h 02 min"


def test_status_line_counts_layers_from_0_like_the_heatmap() -> None:
    events = run_events(layers=2, finished=False)
    second_layer = next(i for i, e in enumerate(events) if isinstance(e, SublayerPruned) and e.layer == 1)
    view = fold(events[: second_layer + 1])
    line = progress_line(view, 0.0)
    assert line.startswith("pruning layer 1 · 1 of 2 layers done · ") and view.pruned[-1].layer == 1
    assert "of 2 ·" not in line  # no 1-based "layer 2 of 2" beside a heat-map row 1
