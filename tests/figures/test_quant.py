"""Figures of quantizing runs: AWP's projection trace, perplexity vs bits per weight, the heat-map hover."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import torch

from toolkit.events import SolverStep, SublayerPruned
from toolkit.figures import quant as viz_quant
from toolkit.figures import run as viz
from toolkit.methods import awp
from toolkit.methods.base import LinearStats, SolveContext
from toolkit.spec.compression import QuantSpec
from toolkit.spec.targets import Unstructured


def valid(fig: go.Figure) -> go.Figure:
    go.Figure(fig.to_dict())  # raises if plotly would reject it
    return fig


def joint_steps() -> list[SolverStep]:
    """The SolverSteps of a short AWP joint run (4 ramp, 2 hold, 4 joint iterations) on a random layer."""
    gen = torch.Generator().manual_seed(0)
    W, X = torch.randn(8, 32, generator=gen), torch.randn(32, 256, generator=gen)
    events: list = []
    cfg = awp.AWPConfig(ramp_iters=4, hold_iters=2, joint_iters=4)
    awp.prune(W, LinearStats(X @ X.T / 256, 256), Unstructured(0.5), cfg,
              SolveContext(name="mlp.up_proj", quant=QuantSpec(4, 16), emit=events.append))
    return [e for e in events if isinstance(e, SolverStep)]


def test_projection_figure_draws_the_ramp_and_the_bits_of_the_joint_schedule() -> None:
    steps = joint_steps()
    assert viz_quant.has_projection_trace(steps)
    fig = valid(viz_quant.projection_figure(steps, revision="r"))
    distance, sparsity, bits = fig.data
    assert list(distance.x) == list(range(1, 11)) and all(d > 0 for d in distance.y)  # step 0 has no projection
    assert sparsity.y[0] < sparsity.y[2] < sparsity.y[3] == sparsity.y[9] == 0.5  # ramp 0 → 50%, then held
    assert list(bits.y) == [32.0] * 6 + [4.0] * 4  # quantized from step ramp + hold + 1
    assert "layer 0 · mlp.up_proj" in fig.layout.title.text
    empty = valid(viz_quant.projection_figure([SolverStep(layer=0, name="q", solver="fista", step=1, objective=1.0)]))
    assert "appear here" in empty.layout.annotations[0].text


def test_bits_figure_one_line_per_method_and_sparsity_sorted_by_bits() -> None:
    points = [{"method": "awp", "pattern": "none", "sparsity": f"int{b}:g128", "quant": f"int{b}:g128",
               "bits_per_weight": b + 20 / 128, "ppl": 10.0 * (5 - b)} for b in (4, 2, 3)]
    points += [{"method": "awp", "pattern": "unstructured", "sparsity": "50%+int4:g128", "quant": "int4:g128",
                "bits_per_weight": 4 + 20 / 128, "ppl": 30.0},
               {"method": "rtn", "pattern": "none", "sparsity": "int4:g128", "quant": "int4:g128",
                "bits_per_weight": math.nan, "ppl": 12.0}]  # no bits: left out
    fig = valid(viz_quant.bits_figure(points, dense_ppl=8.0))
    names = [trace.name for trace in fig.data]
    assert names == ["awp", "awp 50%", "dense (8.00)"]
    assert list(fig.data[0].text) == ["int2:g128", "int3:g128", "int4:g128"]
    assert list(fig.data[0].y) == [30.0, 20.0, 10.0] and fig.layout.yaxis.type == "log"
    assert "appear" in valid(viz_quant.bits_figure([])).layout.annotations[0].text


def test_heatmap_hover_shows_the_quantization_error() -> None:
    event = SublayerPruned(layer=0, name="q_proj", shape=[4, 8], sparsity=0.0, rel_error=0.1, rel_error_dense=math.nan,
                           damping=math.nan, seconds=0.1, bits=4.156, quant_rel_error=0.0321)
    fig = valid(viz.error_heatmap([event], num_layers=1, linears=["q_proj"]))
    assert "4.16 bits/weight" in fig.data[0].text[0][0] and "0.0321" in fig.data[0].text[0][0]
