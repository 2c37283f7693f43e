"""Fold the input scales of a finished layer into what feeds each group (AWQ with ``scale=shared``).

When every group of a decoder layer is solved, each group whose linears share an input scale s
(:class:`~toolkit.methods.awq.ScaledQuantState`) has diag(s)⁻¹ moved onto its input
(:mod:`toolkit.models.fold`): the norm's gain, or the rows of v_proj / up_proj and their grid's scales.
Every linear then stores its plain grid Q(W·diag s), written through the run's journal (undone on a
failure like every other write) and handed to the sinks again, so the run record and the saved
checkpoint hold states that dequantize to the weights the model computes with. The layer's function
is unchanged up to the rounding of the model's dtype.
"""

from __future__ import annotations

import torch
from torch import nn

from toolkit.engine.state import RunState
from toolkit.errors import ToolkitError
from toolkit.methods.quant_grid import QuantState
from toolkit.models.fold import norm_gain, owner, plain, scaled_rows, shared_scale
from toolkit.models.layers import get_weight


def fold_layer(run: RunState, layer: nn.Module, linears: dict[str, nn.Module], groups: list[list[str]]) -> None:
    """Fold the current layer's input scales into what feeds each group (states in ``run.layer_states``)."""
    states: dict[str, QuantState] = dict(run.layer_states)
    run.layer_states.clear()
    changed: dict[str, QuantState] = {}
    for group in groups:
        try:
            scale = shared_scale(states, group)
        except ValueError as exc:
            raise ToolkitError(f"layer {run.layer}: {exc}") from None
        if scale is None:
            continue
        feeder = owner(layer, linears, group)
        if feeder is None:
            raise ToolkitError(f"layer {run.layer}: nothing before {group} can take their input scale")
        if feeder.kind == "norm":
            norm = getattr(layer, feeder.name)
            run.writeback.weight(norm, norm_gain(norm, scale), run.storage_dtype)
        else:
            _scale_rows(run, linears[feeder.name], feeder.name, states, changed, scale)
        for name in group:
            changed.setdefault(name, plain(states[name]))
    for name, state in changed.items():
        module = linears[name]
        run.writeback.weight(module, state.to(get_weight(module).device).effective_weight(), run.storage_dtype)
        run.on_quant(run.layer, name, state.to("cpu"))


def _scale_rows(run: RunState, module: nn.Module, name: str, states: dict[str, QuantState],
                changed: dict[str, QuantState], scale: torch.Tensor) -> None:
    """Divide the feeding linear's rows (and bias) by s: its grid's scales when it is quantized, else its weight."""
    state = changed.get(name) or (plain(states[name]) if name in states else None)
    if state is not None:
        changed[name] = scaled_rows(state, scale)
    else:
        weight = get_weight(module).detach().float()
        run.writeback.weight(module, weight / scale.to(weight.device).unsqueeze(1), run.storage_dtype)
    bias = getattr(module, "bias", None)
    if isinstance(bias, torch.Tensor):
        scaled = (bias.detach().float() / scale.to(bias.device)).to(bias.dtype)
        run.writeback.set_attr(bias, "data", scaled)
