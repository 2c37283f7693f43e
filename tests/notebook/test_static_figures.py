"""The static image a saved notebook carries draws what the live figure shows; no progress bars; the kernel note."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from typing import Any

import matplotlib
import plotly.graph_objects as go
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex

from tests.notebook.saved_figures import expected_colors, png_has_color, png_pixels
from toolkit.events import SublayerPruned
from toolkit.figures import allocation as viz_allocation
from toolkit.figures import recovery as viz_recovery
from toolkit.figures import run as viz_run
from toolkit.figures.paper import png_bytes, to_matplotlib
from toolkit.figures.static import fallback_bundle
from toolkit.notebook.kernel_note import CLASS, DISCONNECTED, GONE, kernel_note, kernel_note_html
from toolkit.notebook.quiet import HUB_SWITCH, TQDM_SWITCH


def _bars_with_reference() -> go.Figure:
    fig = go.Figure(go.Bar(x=["uniform", "owl", "owl+dsnot"], y=[90.0, 70.0, 65.0],
                           marker_color=["#636efa", "#EF553B", "#00cc96"]))
    return fig.add_hline(y=20.0, line_dash="dash", line_color="#2a3f5f", annotation_text="dense 20.00")


def _texts(fig: Any) -> list[str]:
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]


def test_bars_keep_their_own_colours_and_the_reference_line() -> None:
    fig = to_matplotlib(_bars_with_reference())
    ax = fig.axes[0]
    assert [to_hex(p.get_facecolor()) for p in ax.patches] == ["#636efa", "#ef553b", "#00cc96"]
    dashed = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and to_hex(dashed[0].get_color()) == "#2a3f5f" and list(dashed[0].get_ydata()) == [20, 20]
    assert "dense 20.00" in _texts(fig)


def test_traces_without_a_colour_get_plotlys_not_matplotlibs() -> None:
    fig = go.Figure([go.Scatter(x=[1, 2], y=[k, k + 1], name=str(k)) for k in range(3)])
    lines = to_matplotlib(fig).axes[0].lines
    assert [to_hex(line.get_color()) for line in lines] == ["#636efa", "#ef553b", "#00cc96"]


def test_the_two_loss_lines_stay_apart() -> None:
    """Raw loss thin and faint, its running mean thick: the same colour, told apart by width and opacity."""
    fig = viz_recovery.loss_figure(list(range(1, 21)), [3.0 - 0.05 * k for k in range(20)], total_steps=20)
    raw, mean = to_matplotlib(fig).axes[0].lines[:2]
    assert raw.get_linewidth() < mean.get_linewidth() and (raw.get_alpha() or 1.0) < 0.5 < (mean.get_alpha() or 1.0)


def test_a_right_hand_axis_shares_the_panel_and_the_target_line_stays() -> None:
    fig = viz_allocation.allocation_figure([0.6, 0.7, 0.8], target=0.7, outlier_ratios=[0.01, 0.02, 0.005],
                                           label="owl")
    drawn = to_matplotlib(fig)
    left, right = drawn.axes[:2]
    assert left.get_position().bounds == right.get_position().bounds  # one panel, two y axes
    assert right.get_ylabel() == "outlier ratio LOD_l" and left.get_ylabel() == "sparsity of the layer"
    assert any(line.get_linestyle() == "--" and list(line.get_ydata()) == [0.7, 0.7] for line in left.lines)
    assert "target 70%" in _texts(drawn)


def test_the_png_is_cropped_to_what_was_drawn() -> None:
    """The error heat-map's colour-bar title and axis labels lie inside the image, whatever the figure size."""
    events = [SublayerPruned(layer=i, name=n, shape=[8, 8], sparsity=0.5, rel_error=10.0 ** -(i + 1),
                             rel_error_dense=0.0, damping=0.0, seconds=0.1)
              for i in range(4) for n in ("self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj")]
    fig = viz_run.error_heatmap(events, num_layers=4, linears=["self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj"])
    drawn = to_matplotlib(fig)
    tight = drawn.get_tightbbox(FigureCanvasAgg(drawn).get_renderer())  # inches
    assert tight.x1 > drawn.get_size_inches()[0] or tight.y0 < 0  # past the figure's edges: cut off uncropped
    pixels = png_pixels(base64.b64encode(png_bytes(fig, dpi=110)).decode())
    pad = 2 * float(matplotlib.rcParams["savefig.pad_inches"])  # the margin a cropped file keeps around it
    assert abs(pixels.shape[1] - (tight.width + pad) * 110) <= 8
    assert abs(pixels.shape[0] - (tight.height + pad) * 110) <= 8


def test_the_fallback_png_has_every_colour_of_the_figure() -> None:
    bundle = fallback_bundle(_bars_with_reference())
    pixels = png_pixels(bundle["image/png"])
    colors = expected_colors(bundle["application/vnd.plotly.v1+json"])
    assert len(colors) == 4 and all(png_has_color(pixels, color) for _, color in colors)


def test_quiet_progress_bars_switches_tqdm_hub_and_transformers_off() -> None:
    """Called first, every bar is off; called after tqdm's import, the Hugging Face ones are, and it warns."""
    code = ("import sys\nfrom toolkit.notebook.quiet import quiet_progress_bars\n"
            "{first}\nquiet_progress_bars()\n"
            "from transformers.utils import logging\nfrom huggingface_hub.utils import are_progress_bars_disabled\n"
            "from tqdm import tqdm\n"
            "print(logging.is_progress_bar_enabled(), are_progress_bars_disabled(), tqdm(range(1)).disable)")
    clean = {k: v for k, v in os.environ.items() if k not in (TQDM_SWITCH, HUB_SWITCH)}  # a dashboard test set them
    for first, tqdm_off in (("", "True"), ("import transformers.utils.logging", "False")):
        done = subprocess.run([sys.executable, "-c", code.format(first=first)], capture_output=True, text=True,
                              check=True, timeout=300, env=clean)
        assert done.stdout.split() == ["False", "True", tqdm_off], (first, done.stdout, done.stderr[-500:])
        assert ("tqdm was imported before" in done.stderr) == (tqdm_off == "False")


def test_the_kernel_note_shows_only_on_a_disconnected_widget() -> None:
    """Hidden by default; ipywidgets' class for a widget without a live comm shows it."""
    html = kernel_note_html()
    assert f".{CLASS}{{display:none}}" in html and f".{DISCONNECTED} .{CLASS}{{display:block" in html
    assert f'<div class="{CLASS}">' in html and "Re-run this cell" in GONE and "Re-run this cell" in html
    assert kernel_note().value == html
