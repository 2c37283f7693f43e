"""Notebook widgets: Dashboard on tiny-llama, compare_masks and sweep_plot on a synthetic store."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.synthetic_runs import write_run
from toolkit.errors import ToolkitError
from toolkit.notebook.widgets import Dashboard, compare_masks, sweep_plot

QUICK = {"nsamples": 4, "seqlen": 32, "eval_seqlen": 32, "eval_windows": 2}


def test_dashboard_runs_and_draws(tmp_path: Path) -> None:
    dash = Dashboard(model="tiny-llama", method="wanda", sparsity="2:4", runs_dir=str(tmp_path), **QUICK)
    view = dash.run()
    assert view.status == "finished" and view.sparsity == "2:4" and view.ppl["wiki"] > 0
    heatmap = dash.figures["heatmap"]
    assert heatmap.data[0].type == "heatmap" and "14 of 14 linears" in heatmap.layout.title.text
    assert "finished" in dash.status.value and "achieved sparsity 50.00%" in dash.result.value
    assert dash.result_dict is not None and dash.result_dict["sparsity"] == "2:4"
    dash.run(model="")
    assert "no model given" in dash.status.value
    dash.options.value = "block_size"
    dash.run()
    assert "key=value" in dash.status.value


def test_dashboard_shows_ranking_and_kept_panels_only_for_structured_runs(tmp_path: Path) -> None:
    dash = Dashboard(model="tiny-llama", method="numerical", sparsity="structured:30%", runs_dir=str(tmp_path),
                     **{**QUICK, "eval_windows": 1})
    assert dash.structure.layout.display == "none"  # nothing run yet
    view = dash.run(eval_data=None)
    assert view.status == "finished" and dash.structure.layout.display == "flex"
    ranking, kept = dash.figures["ranking"], dash.figures["kept"]
    assert view.structure.ranking is not None and len(ranking.data) == 2  # heads and channels, coloured apart
    assert ranking.layout.shapes[0].y0 == view.structure.ranking.threshold  # the threshold line η
    assert "removed" in ranking.layout.title.text
    assert [t.type for t in kept.data] == ["heatmap", "heatmap"]  # layer × head and layer × channel maps
    assert sorted(view.structure.kept) == ["channels", "heads"]
    assert len(dash.figures["solver"].data) == 2 * 2  # Newton traces: o_proj and down_proj of both layers
    dash.method.value, dash.sparsity.value = "wanda", "50%"
    assert dash.run(eval_data=None).status == "finished" and dash.structure.layout.display == "none"


def test_compare_masks_and_sweep_plot(tmp_path: Path) -> None:
    a = write_run(tmp_path, {"model": "m", "method": "wanda", "sparsity": "50%", "eval_data": "wiki"}, seed=1)
    b = write_run(tmp_path, {"model": "m", "method": "magnitude", "sparsity": "2:4", "eval_data": "wiki"}, seed=2)
    comparison = compare_masks(a.name, b, layer=0, linear="self_attn.q_proj", runs_dir=tmp_path)
    assert len(comparison.metrics) == 1 and len(comparison.figures()) == 4
    assert len(comparison.every_linear().data) == 2  # IoU and its chance line
    fig = sweep_plot(model="m", runs_dir=tmp_path)
    names = [t.name for t in fig.data]  # stored runs of the same second list in either order
    assert sorted(names[:2]) == ["magnitude (n:m)", "wanda"] and names[2] == "dense (20.00)"
    write_run(tmp_path, {"model": "other", "method": "wanda", "sparsity": "50%"})
    with pytest.raises(ToolkitError, match="different models"):
        compare_masks(*sorted(p.name for p in tmp_path.iterdir())[:3], layer=0, linear="mlp.down_proj",
                      runs_dir=tmp_path)


def test_dashboard_keeps_images_shows_generations_and_saves(tmp_path: Path) -> None:
    dash = Dashboard(model="tiny-llama", method="wanda", sparsity="50%", runs_dir=str(tmp_path), generate=True,
                     **QUICK)
    with pytest.raises(ToolkitError, match="run the dashboard first"):
        dash.save()
    view = dash.run()
    assert view.status == "finished"
    drawn = set(dash.current_figures())
    assert {"heatmap", "layers"} <= drawn and not drawn & {"solver", "lambda"}  # wanda has no solver trace
    assert dash.snapshot.count('src="data:image/png;base64,') == len(drawn)  # one image per drawn figure
    assert dash._kept_bundle()["text/html"] == dash.snapshot  # the output written under the widget
    assert "Re-run this cell" in dash._repr_mimebundle_()["text/html"]
    # the widget state a saved notebook keeps holds the final heat-map, not the empty first one
    state = dash.figures["heatmap"].get_state()["_widget_data"]
    assert state[0]["type"] == "heatmap" and len(state[0]["z"]) == view.num_layers
    panel = dash.generations.value
    assert panel.count("tokens/s") >= 2 * 5 and "The capital of France is" in panel and "<th>pruned</th>" in panel
    written = dash.save(tmp_path / "figs", ["png", "svg"])
    assert sorted(p.name for p in written) == sorted(f"{name}.{fmt}" for name in drawn for fmt in ("png", "svg"))
    assert all(p.stat().st_size > 0 for p in written)
    assert [p.parent for p in dash.save(formats=["pdf"])] == [tmp_path / view.run_id / "figures"] * len(drawn)


def test_dashboard_layout_wraps_instead_of_fixed_widths() -> None:
    dash = Dashboard(model="tiny-llama")
    rows = [child for child in dash.widget.children if type(child).__name__ == "HBox"]
    assert rows and all(row.layout.flex_flow == "row wrap" for row in rows)
    panels = [box for row in rows for box in row.children]
    assert all(box.layout.flex == "0 1 auto" and box.layout.overflow == "auto" for box in panels)
    assert all(figure.layout.width == 460 for figure in dash.figures.values())


def test_mask_comparison_saves_every_figure(tmp_path: Path) -> None:
    a = write_run(tmp_path, {"model": "m", "method": "wanda", "sparsity": "50%", "eval_data": "wiki"}, seed=1)
    b = write_run(tmp_path, {"model": "m", "method": "magnitude", "sparsity": "50%", "eval_data": "wiki"}, seed=2)
    comparison = compare_masks(a, b, layer=0, linear="self_attn.q_proj", runs_dir=tmp_path)
    written = comparison.save(tmp_path / "out", ["pdf"])
    assert [p.name for p in written] == ["masks.pdf", "difference.pdf", "overlap.pdf", "histograms.pdf"]
    assert all(p.read_bytes().startswith(b"%PDF") for p in written)
