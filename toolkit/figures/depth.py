"""The layer scores of a depth run (``--method depth``) as a bar chart (CONTRIBUTING.md R8: plain data in, no torch).

:func:`depth_figure` draws one bar per decoder layer of the dense model: its block influence
1 − E[cos(x_in, x_out)] (ShortGPT), removed layers in red and kept ones in blue. Under
``score=angular`` a line adds the angular distance E[arccos(cos(x_l, x_{l+n}))]/π of the block of n
layers starting at each layer l (right axis), the one chosen being the lowest point. The hover
gives each layer's relative output error of skipping it, ‖x_out − x_in‖/‖x_out‖.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from toolkit.events import DepthScored
from toolkit.figures.run import HEIGHT, PALETTE, base_layout, figure, gaps, note_figure

KEPT_COLOR, REMOVED_COLOR, ANGULAR_COLOR = PALETTE[0], PALETTE[1], PALETTE[2]
TITLE = "layer scores: block influence 1 − cos(x_in, x_out)"
NOT_DEPTH = "depth runs draw here (--method depth, --sparsity structured:4 layers)"


def depth_title(scored: DepthScored) -> str:
    """What was removed, by which score: ``removed 4 of 30 layers (block influence): 20, 24, 25, 26``."""
    how = "block influence" if scored.score == "bi" else f"angular distance of {scored.block} consecutive layers"
    which = ", ".join(str(i) for i in scored.removed)
    return f"{TITLE}<br>removed {len(scored.removed)} of {scored.num_layers} layers ({how}): {which}"


def depth_figure(scored: DepthScored | None, *, revision: Any = None, height: int = HEIGHT) -> go.Figure:
    """Bars of every layer's block influence (removed red, kept blue), the angular distances as a line."""
    if scored is None:
        return note_figure(TITLE, "no layer scores yet: " + NOT_DEPTH, height, revision)
    removed = set(scored.removed)
    layers = list(range(scored.num_layers))
    errors = list(scored.identity_error) or [float("nan")] * len(layers)
    data: list[dict[str, Any]] = []
    for gone, label, color in ((False, "kept layer", KEPT_COLOR), (True, "removed layer", REMOVED_COLOR)):
        picked = [i for i in layers if (i in removed) == gone]
        if not picked:
            continue
        data.append({"type": "bar", "name": label, "x": picked, "y": gaps([scored.influence[i] for i in picked]),
                     "marker": {"color": color}, "customdata": [[errors[i]] for i in picked],
                     "hovertemplate": f"layer %{{x}} ({label})<br>block influence %{{y:.4g}}<br>"
                                      "error of skipping it %{customdata[0]:.3g}<extra></extra>"})
    layout = base_layout(depth_title(scored), height, revision, barmode="overlay",
                         legend={"orientation": "h", "y": -0.25}, margin={"l": 60, "r": 60, "t": 64, "b": 44},
                         xaxis={"title": {"text": "decoder layer (dense model)"}, "dtick": 1 if len(layers) <= 16
                                else None},
                         yaxis={"title": {"text": "block influence"}, "rangemode": "tozero"})
    if scored.angular:
        data.append({"type": "scatter", "mode": "lines+markers", "name": f"angular distance, {scored.block} layers "
                     "from here", "x": list(range(len(scored.angular))), "y": gaps(scored.angular), "yaxis": "y2",
                     "line": {"color": ANGULAR_COLOR, "width": 1.5}, "marker": {"size": 5, "color": ANGULAR_COLOR},
                     "hovertemplate": f"the {scored.block} layers from layer %{{x}}<br>angular distance %{{y:.4g}}"
                                      "<extra></extra>"})
        layout["yaxis2"] = {"title": {"text": "angular distance"}, "overlaying": "y", "side": "right",
                            "rangemode": "tozero", "showgrid": False}
    return figure(data, layout)
