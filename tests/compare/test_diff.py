"""Compare at native resolution: tiles, the four-way difference, the fixed-scale block view, IoU against chance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from app import compare_tab
from tests.helpers.synthetic_runs import write_run
from toolkit.compare import diff as mask_diff
from toolkit.compare import masks as compare
from toolkit.errors import ToolkitError
from toolkit.figures import mask_tiles as viz_mask_tiles
from toolkit.figures import masks as viz_masks


def valid(fig: go.Figure) -> go.Figure:
    go.Figure(fig.to_dict())
    return fig


def test_categories_and_counts_by_hand() -> None:
    a = np.array([[1, 1, 0, 0, 1]], dtype=bool)
    b = np.array([[1, 0, 1, 0, 1]], dtype=bool)
    codes = mask_diff.categories(a, b)
    assert codes.tolist() == [[3, 2, 1, 0, 3]]
    assert mask_diff.category_counts(codes) == [1, 1, 1, 2]  # both pruned, B only, A only, both kept
    assert [mask_diff.CATEGORIES[c] for c in codes[0]] == ["kept by both", "kept by A only", "kept by B only",
                                                             "pruned by both", "kept by both"]
    with pytest.raises(ToolkitError, match="different shapes"):
        mask_diff.categories(a, b[:, :4])


def test_tiles_are_cut_at_the_edge_and_checked() -> None:
    assert mask_diff.tile((576, 1536), 0, 0, 128) == mask_diff.Tile(0, 0, 128, 128)
    edge = mask_diff.tile((576, 1536), 500, 1500, 128)
    assert (edge.rows, edge.cols) == (76, 36) and edge.label == "rows 500–575, columns 1500–1535"
    assert edge.cut(np.zeros((576, 1536))).shape == (76, 36)
    with pytest.raises(ToolkitError, match="tile row 576 is outside the 576 output rows; pick 0 to 575"):
        mask_diff.tile((576, 1536), 576, 0, 128)
    with pytest.raises(ToolkitError, match="tile column -1"):
        mask_diff.tile((576, 1536), 0, -1, 128)
    with pytest.raises(ToolkitError, match="tile size"):
        mask_diff.tile((576, 1536), 0, 0, 0)


def test_tile_images_are_native_resolution() -> None:
    rng = np.random.default_rng(0)
    masks = {"A": rng.random((576, 1536)) < 0.5, "B": rng.random((576, 1536)) < 0.5}
    window = mask_diff.tile((576, 1536), 128, 256, 128)
    fig = valid(viz_mask_tiles.tile_images_figure(masks, window))
    assert len(fig.data) == 2 and fig.data[1].xaxis == "x2"
    for trace, mask in zip(fig.data, masks.values(), strict=True):
        assert np.asarray(trace.z).shape == (128, 128)  # one cell per weight: nothing averaged away
        np.testing.assert_array_equal(np.asarray(trace.z), mask[128:256, 256:384])
        assert list(trace.x)[:2] == [256, 257] and list(trace.y)[:2] == [128, 129]
    assert "rows 128–255, columns 256–383" in fig.layout.title.text


def test_difference_has_four_categorical_colours_a_legend_and_counts() -> None:
    a = np.zeros((4, 8), dtype=bool)
    b = np.zeros((4, 8), dtype=bool)
    a[0], b[1], a[2], b[2] = True, True, True, True  # row 0: A only; row 1: B only; row 2: both; row 3: neither
    window = mask_diff.tile(a.shape, 0, 0, 4)
    fig = valid(viz_mask_tiles.category_difference_figure(a, b, ("wanda", "sparsegpt"), window))
    image, swatches = fig.data[0], fig.data[1:]
    assert np.asarray(image.z).tolist() == [[2] * 4, [1] * 4, [3] * 4, [0] * 4]
    assert (image.zmin, image.zmax) == (-0.5, 3.5)
    colours = {entry[1] for entry in image.colorscale}
    assert len(colours) == 4 and colours == set(viz_mask_tiles.CATEGORY_COLORS)
    assert [t.name for t in swatches] == ["pruned by both · 8 (25.0%)", "kept by sparsegpt only · 8 (25.0%)",
                                          "kept by wanda only · 8 (25.0%)", "kept by both · 8 (25.0%)"]
    assert [t.marker.color for t in swatches] == list(viz_mask_tiles.CATEGORY_COLORS)
    assert "50.0% of this tile kept by one run only" in fig.layout.title.text


def test_whole_matrix_view_is_block_kept_fraction_on_a_fixed_colour_scale() -> None:
    stripes = np.zeros((576, 1536), dtype=bool)
    stripes[:, ::2] = True
    stripes[:, :384] = True  # a band of columns kept whole
    window = mask_diff.tile(stripes.shape, 0, 0, 128)
    fig = valid(viz_masks.mask_images_figure({"A": stripes, "B": ~stripes}, tile=window))
    trace = fig.data[0]
    assert (trace.zmin, trace.zmax) == (0, 1)  # fixed scale: a block's colour means the same in every run
    colours = [stop[1] for stop in trace.colorscale]
    assert len(set(colours)) == 5 and not any(c[1:3] == c[3:5] == c[5:7] for c in colours)  # no grey level
    image = np.asarray(trace.z)
    assert image.max() == 1.0 and image.min() == pytest.approx(0.5)  # the kept band stands out from the 50% rest
    assert len(fig.layout.shapes) == 2 and fig.layout.shapes[0].xref == "x" and fig.layout.shapes[1].xref == "x2"


def test_chance_iou_matches_random_masks() -> None:
    rng = np.random.default_rng(0)
    for p, q in ((0.5, 0.5), (0.3, 0.7), (0.1, 0.9), (0.25, 0.25)):
        draws = [compare.iou(rng.random((64, 256)) < p, rng.random((64, 256)) < q) for _ in range(20)]
        assert compare.chance_iou(p, q) == pytest.approx(float(np.mean(draws)), abs=0.005), (p, q)
    assert compare.chance_iou(0.5, 0.5) == pytest.approx(1 / 3)
    assert compare.chance_iou(1.0, 1.0) == 1.0 and compare.chance_iou(0.0, 0.0) == 1.0


def test_overlap_chart_is_iou_against_its_chance_baseline() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.random((32, 64)) < 0.5, rng.random((32, 64)) < 0.3
    rows = compare.pairwise({"A": a, "B": b, "C": a.copy()})
    fig = valid(viz_masks.overlap_figure(rows))
    measured, chance = fig.data
    assert measured.name == "IoU of kept weights" and "random masks" in chance.name and "pq/(p+q−pq)" in chance.name
    assert list(measured.y) == [pytest.approx(compare.iou(a, b)), 1.0]
    p, q = a.mean(), b.mean()
    assert chance.y[0] == pytest.approx(p * q / (p + q - p * q))
    assert "Hamming" not in str(fig.to_dict())  # one metric, one direction: no mixed bars
    every = [{"layer": layer, "name": "mlp.up_proj", **row} for layer in range(2) for row in rows]
    lines = valid(viz_masks.all_linears_overlap_figure(every))
    assert [t.name.split(" (")[0] for t in lines.data[:2]] == ["IoU A vs B", viz_masks.CHANCE_LEGEND]
    assert lines.data[1].line.dash == "dot" and len(lines.data) == 4


def test_compare_view_draws_the_tile_and_refuses_a_tile_outside(tmp_path: Path) -> None:
    a = write_run(tmp_path, {"model": "tiny-llama", "method": "wanda", "sparsity": "50%"}, seed=1)
    b = write_run(tmp_path, {"model": "tiny-llama", "method": "magnitude", "sparsity": "50%"}, seed=2)
    view = compare_tab.compare_view([a.name, b.name], "1", "mlp.down_proj", 4, str(tmp_path), (8, 0, 32))
    assert "two random masks" in view["message"]
    assert np.asarray(view["tile"].data[0].z).shape == (8, 8)  # rows 8–15 of the (16, 8) matrix
    assert "rows 8–15, columns 0–7" in view["difference"].layout.title.text
    bad = compare_tab.compare_view([a.name, b.name], "1", "mlp.down_proj", 4, str(tmp_path), (40, 0, 32))
    assert "tile row 40 is outside the 16 output rows" in bad["message"]
    assert all(bad[panel] is None for panel in compare_tab.PANELS)
    odd = compare_tab.compare_view([a.name, b.name], "1", "mlp.down_proj", 4, str(tmp_path), (None, 0, 32))
    assert "the tile row must be a whole number" in odd["message"]
