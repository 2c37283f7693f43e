"""Publication export (matplotlib redraw of the plotly figures) and the notebooks' static fallback."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest

from toolkit.compare import masks as compare
from toolkit.errors import ToolkitError
from toolkit.events import SublayerPruned
from toolkit.figures import masks as viz_masks
from toolkit.figures import run as viz
from toolkit.figures import sweep as viz_sweep
from toolkit.figures.paper import save_figure, to_matplotlib
from toolkit.figures.static import fallback_bundle

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTLY = "application/vnd.plotly.v1+json"


def _masks() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"wanda": rng.random((48, 80)) > 0.5, "sparsegpt": rng.random((48, 80)) > 0.5}


def _heatmap() -> object:
    events = [SublayerPruned(layer=i, name=n, shape=[8, 8], sparsity=0.5, rel_error=10.0 ** -(i + 1),
                             rel_error_dense=0.0, damping=0.0, seconds=0.1)
              for i in range(3) for n in ("self_attn.q_proj", "mlp.down_proj")]
    return viz.error_heatmap(events, num_layers=3, linears=["self_attn.q_proj", "mlp.down_proj"])


def _sweep() -> object:
    points = [{"method": "wanda", "sparsity": f"{s}%", "achieved_sparsity": s / 100, "ppl": 20.0 + s,
               "pattern": "unstructured"} for s in (30, 50, 70)]
    return viz_sweep.sweep_figure(points, dense_ppl=18.0)


def test_every_format_is_written_and_valid(tmp_path: Path) -> None:
    written = save_figure(_sweep(), tmp_path / "out" / "sweep.png")  # the suffix is dropped: one stem, 3 files
    assert [p.name for p in written] == ["sweep.png", "sweep.pdf", "sweep.svg"]
    png, pdf, svg = (p.read_bytes() for p in written)
    assert png.startswith(PNG_MAGIC) and pdf.startswith(b"%PDF") and b"<svg" in svg[:2000]
    assert b"perplexity vs sparsity" in svg and b"wanda" in svg  # text stays text in the SVG


def test_heatmap_keeps_its_fixed_scale_and_cells() -> None:
    fig = to_matplotlib(_heatmap())
    image = fig.axes[0].get_images()[0]
    assert image.get_array().shape == (3, 2) and image.get_clim() == (-4.0, 0.0)  # log10 of 1e-4…1
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["q_proj", "down_proj"]
    assert fig.axes[0].yaxis_inverted()  # layer 0 at the top, as in the app


def test_mask_figures_keep_their_panels_and_data() -> None:
    masks = _masks()
    images = to_matplotlib(viz_masks.mask_images_figure(masks))
    drawn = [ax.get_images()[0].get_array() for ax in images.axes if ax.get_images()]
    assert len(drawn) == 2 and np.array_equal(np.asarray(drawn[0]), masks["wanda"].astype(float))
    difference = to_matplotlib(viz_masks.mask_difference_figure(masks["wanda"], masks["sparsegpt"]))
    assert set(np.unique(np.asarray(difference.axes[0].get_images()[0].get_array()))) <= {-1.0, 0.0, 1.0}
    overlap = to_matplotlib(viz_masks.overlap_figure(compare.pairwise(masks, 4)))
    assert len(overlap.axes[0].patches) == 2  # IoU and the chance IoU of two random masks, for one pair


def test_unknown_format_is_refused_before_drawing(tmp_path: Path) -> None:
    with pytest.raises(ToolkitError, match="figure format jpg is not supported; use png, pdf, svg"):
        save_figure(_sweep(), tmp_path / "x", ["png", "jpg"])
    assert not list(tmp_path.iterdir())


def test_notebook_bundle_carries_plotly_and_a_png() -> None:
    bundle = fallback_bundle(_heatmap())
    assert PLOTLY in bundle and base64.b64decode(bundle["image/png"]).startswith(PNG_MAGIC)
    assert "text/html" not in bundle  # nbconvert must pick the PNG, not a script that needs plotly.js


def test_export_modules_load_without_torch() -> None:
    import subprocess
    import sys

    code = ("import sys, toolkit.figures.paper, toolkit.figures.paper_traces, toolkit.figures.static, "
            "toolkit.notebook.panels, app.figure_download; print('torch' in sys.modules)")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_colour_scale_given_as_plotly_rgb_strings_becomes_a_matplotlib_colormap() -> None:
    from toolkit.figures.paper_traces import colormap

    cmap = colormap([[0.0, "rgb(68, 1, 84)"], [1.0, "rgba(253, 231, 37, 0.5)"]])  # as notebook 02's figures carry it
    assert cmap(0.0) == pytest.approx((68 / 255, 1 / 255, 84 / 255, 1.0))
    assert cmap(1.0) == pytest.approx((253 / 255, 231 / 255, 37 / 255, 0.5))
