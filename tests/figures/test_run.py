"""Figure builders (toolkit.figures.run, toolkit.figures.masks): data and layout asserted on synthetic input.

Builders skip plotly's validation for speed, so every test also validates the figure.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import pytest

from tests.helpers.synthetic_runs import run_events
from toolkit.events import BlockStep, LambdaStep, LayerDone, SolverStep, SublayerPruned
from toolkit.figures import masks as viz_masks
from toolkit.figures import run as viz
from toolkit.figures import sweep as viz_sweep
from toolkit.live.view import fold


def valid(fig: go.Figure) -> go.Figure:
    """Raise if plotly would reject the figure; return it."""
    go.Figure(fig.to_dict())
    return fig


def of(events: list, kind: type) -> list:
    return [e for e in events if isinstance(e, kind)]


def test_error_heatmap_grid_values_and_title() -> None:
    events = run_events(layers=3)
    pruned = of(events, SublayerPruned)[:3]  # layer 0 both linears, layer 1 first
    fig = valid(viz.error_heatmap(pruned, num_layers=3, linears=["self_attn.q_proj", "mlp.down_proj"]))
    (trace,) = fig.data
    assert trace.type == "heatmap" and list(trace.x) == ["q_proj", "down_proj"]
    z = [list(row) for row in trace.z]
    assert len(z) == 3 and z[0] == [pytest.approx(-1.0), pytest.approx(math.log10(0.11))]  # log10 colour
    assert list(trace.customdata[0]) == [pytest.approx(0.1), pytest.approx(0.11)]  # exact values on hover
    assert z[1][1] is None and z[2] == [None, None]  # not yet pruned: empty cells
    title = fig.layout.title.text
    assert "3 of 6 linears" in title and title.index("<br>") < title.index("3 of 6")  # the count on its own line
    assert fig.layout.margin.t > viz.base_layout("x")["margin"]["t"]  # room for the second line
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.uirevision is not None


def test_error_heatmap_before_any_event() -> None:
    fig = valid(viz.error_heatmap([]))
    assert not fig.data and "waiting" in fig.layout.annotations[0].text
    laid_out = valid(viz.error_heatmap([], num_layers=4, linears=["a.b"]))
    assert len(laid_out.data[0].z) == 4 and "0 of 4" in laid_out.layout.title.text


def test_short_names_keep_full_names_when_they_collide() -> None:
    assert viz.short_names(["self_attn.o_proj", "mlp.o_proj"]) == ["self_attn.o_proj", "mlp.o_proj"]
    assert viz.short_names(["mlp.up_proj", "fc1"]) == ["up_proj", "fc1"]


def test_layer_error_line() -> None:
    done = of(run_events(layers=3), LayerDone)
    fig = valid(viz.layer_error_figure(done, num_layers=5))
    assert list(fig.data[0].x) == [0, 1, 2] and list(fig.data[0].y) == pytest.approx([0.05, 0.1, 0.15])
    assert tuple(fig.layout.xaxis.range) == (-0.5, 4.5)


def test_convergence_solver_steps_colour_rounds() -> None:
    view = fold(run_events())
    fig = valid(viz.convergence_figure(view.solver.steps))
    (trace,) = fig.data
    assert list(trace.x) == [0, 1, 2, 3, 4, 5] and trace.y[0] == 10.0
    assert list(trace.marker.color) == [0, 0, 0, 1, 1, 1]
    assert fig.layout.yaxis.type == "log" and "fista convergence" in fig.layout.title.text


def test_convergence_without_rounds_or_positive_objective() -> None:
    steps = [SolverStep(layer=0, name="w", solver="pgd", step=k, objective=-k, values={}) for k in range(3)]
    fig = valid(viz.convergence_figure(steps))
    assert fig.layout.yaxis.type == "linear" and fig.data[0].marker.color == viz.PALETTE[0]


def test_convergence_block_steps_and_empty() -> None:
    blocks = [BlockStep(layer=2, name="w", block=b, removed=10 * b, error=0.1 * b, seconds=0.01) for b in range(4)]
    fig = valid(viz.convergence_figure([], blocks))
    assert fig.data[0].type == "bar" and list(fig.data[0].y) == pytest.approx([0.0, 0.1, 0.2, 0.3])
    empty = valid(viz.convergence_figure([]))
    assert not empty.data and "FISTAPruner" in empty.layout.annotations[0].text


def test_lambda_figure_panels() -> None:
    steps = [LambdaStep(layer=0, name="q", round=r, lam=10.0 ** -r, lam_low=0.0 if r == 0 else 1e-6, lam_high=1.0,
                        e_total=1.0, e_round=0.2 * r, ratio=0.2 * r, xi=0.3, sparsity_before_rounding=0.3 + 0.1 * r,
                        improved=r % 2 == 0) for r in range(4)]
    fig = valid(viz.lambda_figure(steps))
    names = [t.name for t in fig.data]
    assert names == ["λ high", "λ low", "λ", "E_round/E_total", "ξ", "sparsity before rounding"]
    lam_low = fig.data[1]
    assert lam_low.y[0] is None and lam_low.y[1] == 1e-6  # a bound of 0 cannot sit on a log axis
    assert list(fig.data[4].y) == [0.3] * 4 and fig.data[3].yaxis == "y2" and fig.data[5].yaxis == "y3"
    assert list(fig.data[2].marker.symbol) == ["circle", "circle-open", "circle", "circle-open"]
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis3.tickformat == ".0%"
    assert valid(viz.lambda_figure([])).layout.annotations[0].text.startswith("the λ bisection")


def test_sweep_figure_lines_nm_points_and_dense() -> None:
    points = [{"method": "wanda", "sparsity": s, "pattern": k, "achieved_sparsity": a, "ppl": p}
              for s, k, a, p in (("50%", "unstructured", 0.5, 30.0), ("10%", "unstructured", 0.1, 21.0),
                                 ("2:4", "nm", 0.5, 40.0))]
    points += [{"method": "magnitude", "sparsity": "50%", "pattern": "unstructured", "achieved_sparsity": 0.5,
                "ppl": math.nan},
               {"method": "magnitude", "sparsity": "structured:30%", "pattern": "structured", "achieved_sparsity": 0.3,
                "ppl": 90.0}]
    fig = valid(viz_sweep.sweep_figure(points, dense_ppl=20.0))
    names = [t.name for t in fig.data]
    assert names == ["wanda", "wanda (n:m)", "magnitude (structured)", "dense (20.00)"]
    assert list(fig.data[0].x) == [0.1, 0.5]  # sorted by sparsity
    assert fig.data[1].mode == "markers+text" and list(fig.data[1].text) == ["2:4"]
    assert list(fig.data[3].y) == [20.0, 20.0] and fig.layout.yaxis.type == "log"
    assert fig.data[0].marker.color == fig.data[1].marker.color  # one colour per method
    assert not valid(viz_sweep.sweep_figure([])).data


def test_downsample_block_average() -> None:
    mask = np.zeros((600, 100), dtype=bool)
    mask[:3, :] = True  # the first block row is fully kept
    image, block = viz_masks.downsample(mask, 256)
    assert image.shape == (200, 100) and block == (3, 1)
    assert image[0, 0] == 1.0 and image[1, 0] == 0.0
    odd, block = viz_masks.downsample(np.ones((5, 513), dtype=bool), 256)  # edge blocks average real cells only
    assert block == (1, 3) and odd.shape == (5, 171) and np.all(odd == 1.0)
    small, block = viz_masks.downsample(np.eye(4, dtype=bool))
    assert block == (1, 1) and small.shape == (4, 4)


def test_mask_images_and_difference() -> None:
    a = np.tile([True, False], (64, 600))  # (64, 1200): downsampled to ≤ 256 columns
    b = ~a
    fig = valid(viz_masks.mask_images_figure({"A": a, "B": b}))
    assert len(fig.data) == 2 and fig.data[0].z.shape[1] <= 256 and fig.data[1].xaxis == "x2"
    assert fig.layout.xaxis2.matches == "x" and "sparsity 50.0%" in fig.layout.annotations[0].text
    diff = valid(viz_masks.mask_difference_figure(a[:, :8], b[:, :8], ("A", "B")))
    assert set(np.unique(diff.data[0].z)) == {-1.0, 1.0}
    assert "256 kept only in A" in diff.layout.title.text


def test_histograms() -> None:
    masks = {"A": np.eye(8, dtype=bool), "B": np.ones((8, 8), dtype=bool)}
    hist = valid(viz_masks.sparsity_histograms(masks))
    assert len(hist.data) == 4 and hist.data[1].xaxis == "x2"
    assert list(hist.data[0].x) == pytest.approx([7 / 8] * 8)
    assert not valid(viz_masks.all_linears_overlap_figure([])).data


def test_builders_do_not_validate_so_they_are_fast() -> None:
    import time

    view = fold(run_events(layers=30))
    start = time.perf_counter()
    for _ in range(5):
        viz.error_heatmap(view.pruned, num_layers=30, linears=view.linears)
        viz.lambda_figure(view.lambdas.steps)
    assert (time.perf_counter() - start) / 10 < 0.05  # validated builders take 30-50 ms each


def test_long_solver_traces_are_thinned_for_cheap_redraws() -> None:
    steps = [SolverStep(layer=0, name="w", solver="fista", step=k, objective=1.0 / (k + 1), values={"round": k // 20})
             for k in range(50_000)]
    (trace,) = valid(viz.convergence_figure(steps)).data
    assert len(trace.x) <= viz.MAX_POINTS + 1
    assert trace.x[0] == 0 and trace.x[-1] == 49_999  # the whole range is still shown
    assert list(viz.thin(list(range(10)), limit=4)) == [0, 3, 6, 9]
    assert viz.thin([1, 2], limit=4) == [1, 2]


def test_error_heatmap_hover_shows_bits_of_quantized_linears() -> None:
    quantized = SublayerPruned(layer=0, name="q", shape=[2, 2], sparsity=0.0, rel_error=0.1, rel_error_dense=math.nan,
                               damping=math.nan, seconds=0.0, bits=4.125)
    pruned = SublayerPruned(layer=0, name="k", shape=[2, 2], sparsity=0.5, rel_error=0.2, rel_error_dense=math.nan,
                            damping=math.nan, seconds=0.0)
    (trace,) = valid(viz.error_heatmap([quantized, pruned], num_layers=1)).data
    assert list(trace.text[0]) == ["sparsity 0.000 · 4.12 bits/weight", "sparsity 0.500"]


def test_sweep_figure_of_mean_accuracy() -> None:
    points = [{"method": "wanda", "sparsity": s, "pattern": "unstructured", "achieved_sparsity": a, "ppl": 30.0,
               "accuracy": acc} for s, a, acc in (("50%", 0.5, 0.41), ("30%", 0.3, 0.45))]
    points.append({"method": "magnitude", "sparsity": "50%", "pattern": "unstructured", "achieved_sparsity": 0.5,
                   "ppl": 40.0, "accuracy": math.nan})  # no tasks scored: no accuracy point
    fig = valid(viz_sweep.sweep_figure(points, dense_ppl=0.48, metric="accuracy", title="mean zero-shot accuracy"))
    assert [t.name for t in fig.data] == ["wanda", "dense (0.480)"]
    assert list(fig.data[0].y) == [0.45, 0.41] and fig.layout.yaxis.type != "log"
    assert "accuracy" in fig.layout.yaxis.title.text
