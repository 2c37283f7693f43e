"""The Compare tab overlays any number of runs of one model, names them, and never shows a stale layer's IoU."""

from __future__ import annotations

from pathlib import Path

from app import compare_tab
from tests.helpers.synthetic_runs import write_run


def three_runs(root: Path) -> list[str]:
    configs = [{"method": "wanda", "sparsity": "50%"}, {"method": "sparsegpt", "sparsity": "50%"},
               {"method": "fista", "sparsity": "50%", "allocation": "owl:5,0.08", "refine": "dsnot:50"}]
    return [write_run(root, {"model": "tiny-llama", "eval_data": "wiki", **c}, seed=i, ppl=30.0 - 2 * i, layers=3).name
            for i, c in enumerate(configs)]


def test_three_runs_are_overlaid_and_named_by_their_configuration(tmp_path: Path) -> None:
    ids = three_runs(tmp_path)
    labels = dict((value, label) for label, value in compare_tab.run_choices(str(tmp_path)))
    assert labels[ids[2]] == "tiny-llama · FISTAPruner 50% · OWL · DSnoT" and labels[ids[0]] == "tiny-llama · Wanda 50%"
    view = compare_tab.compare_view(ids, "1", "mlp.down_proj", 4, str(tmp_path))
    assert [t.name for t in view["overlay_error"].data] == ["Wanda 50%", "SparseGPT 50%",
                                                            "FISTAPruner 50% · OWL · DSnoT"]
    assert len(view["overlay_sparsity"].data) == 3
    assert [t.name for t in view["overlay_ppl"].data][:3] == ["Wanda", "SparseGPT", "FISTAPruner · OWL · DSnoT"]
    assert "(Wanda 50% vs SparseGPT 50%)" in view["message"]  # the masks' message names runs the same way
    assert "accuracy" in view["overlay_accuracy"].layout.title.text  # no tasks: a note, not an empty axis


def test_a_new_layer_clears_the_old_layers_iou_but_keeps_the_overlays(tmp_path: Path) -> None:
    ids = three_runs(tmp_path)
    view = compare_tab.compare_view(ids, "1", "mlp.down_proj", 4, str(tmp_path))
    assert view["message"].startswith("layer 1 · mlp.down_proj: IoU")
    after = compare_tab.picked("0", "mlp.down_proj")
    assert "IoU of kept weights" not in after["message"] and "layer 0 · mlp.down_proj" in after["message"]
    assert all(after[panel] is None for panel in compare_tab.PANELS)
    assert not set(compare_tab.OVERLAYS) & set(after)  # the overlays are of the runs: left as drawn


def test_runs_of_two_models_are_refused_with_one_line_and_nothing_drawn(tmp_path: Path) -> None:
    ids = three_runs(tmp_path)[:1]
    ids.append(write_run(tmp_path, {"model": "tiny-opt", "method": "wanda", "sparsity": "50%"}).name)
    view = compare_tab.compare_view(ids, "0", "mlp.down_proj", 4, str(tmp_path))
    assert "different models" in view["message"] and "\n" not in view["message"]
    assert all(view[key] is None for key in (*compare_tab.PANELS, *compare_tab.OVERLAYS))


def test_one_run_is_overlaid_while_its_masks_wait_for_a_second(tmp_path: Path) -> None:
    ids = three_runs(tmp_path)[:1]
    view = compare_tab.compare_view(ids, "0", "mlp.down_proj", 4, str(tmp_path))
    assert "two or more" in view["message"] and len(view["overlay_error"].data) == 1
