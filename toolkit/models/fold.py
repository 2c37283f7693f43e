"""Fold a per-input scale s of a group of linears into the operation that feeds them (AWQ's scales).

AWQ computes with Ŵ = Q(W·diag s)·diag(s)⁻¹: the grid values divided column-wise by s, which no
per-group grid holds. Folding moves diag(s)⁻¹ onto the group's input instead, so the stored linear is
the grid Q(W·diag s) itself and the model computes the same function::

    norm before the group (q/k/v, gate/up):  RMSNorm gain g ← g / s           (Gemma: 1 + g ← (1 + g) / s)
    v_proj before o_proj, up_proj before down_proj:  the feeding linear's rows r scaled by 1 / s_r
                                                      (its grid's scales too: a row scale keeps a grid a grid)

A whole group must share one s (the norm feeds all of q, k and v). o_proj's input is v_proj's output
repeated over the query heads of a key/value head (GQA): s folds into v_proj only when the shapes match
(llm-awq skips that scale too). Which operation feeds a group is read off the layer by name
(llama, Qwen2, Mistral and Gemma 3 layouts); :func:`foldable` says whether a group can be folded.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from toolkit.methods.quant_grid import QuantState
from toolkit.models.layers import get_weight

QKV = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
GATE_UP = ("mlp.gate_proj", "mlp.up_proj")
ROW_OWNERS = {"self_attn.o_proj": "self_attn.v_proj", "mlp.down_proj": "mlp.up_proj"}
MLP_NORMS = ("pre_feedforward_layernorm", "post_attention_layernorm")  # Gemma's first: its post_attention one is not


@dataclass(frozen=True)
class Owner:
    """What feeds a group: a norm (its name in the layer) or a linear whose rows are scaled."""

    kind: str  # "norm" | "rows"
    name: str


def owner(layer: nn.Module, linears: dict[str, nn.Module], group: list[str]) -> Owner | None:
    """The operation that feeds ``group`` and can take its input scale, or None when there is none."""
    names = set(group)
    if names <= set(QKV):
        return Owner("norm", "input_layernorm") if _norm(layer, "input_layernorm") is not None else None
    if names <= set(GATE_UP):
        norm = next((name for name in MLP_NORMS if _norm(layer, name) is not None), None)
        return Owner("norm", norm) if norm is not None else None
    if len(group) == 1 and group[0] in ROW_OWNERS:
        feeder = ROW_OWNERS[group[0]]
        target = linears.get(feeder)
        if target is not None and get_weight(target).shape[0] == get_weight(linears[group[0]]).shape[1]:
            return Owner("rows", feeder)
    return None


def foldable(layer: nn.Module, linears: dict[str, nn.Module], group: list[str]) -> bool:
    """Whether a scale shared by ``group`` can be folded into what feeds it."""
    return owner(layer, linears, group) is not None


def _norm(layer: nn.Module, name: str) -> nn.Module | None:
    module = getattr(layer, name, None)
    return module if isinstance(module, nn.Module) and isinstance(getattr(module, "weight", None), Tensor) else None


def norm_gain(norm: nn.Module, scale: Tensor) -> Tensor:
    """The norm's new weight: g / s, or for Gemma's x̂ · (1 + g) the g' with 1 + g' = (1 + g) / s (float32)."""
    weight = norm.weight.detach().float()  # type: ignore[union-attr]
    scale = scale.to(weight.device)
    if "Gemma" in type(norm).__name__:
        return (1.0 + weight) / scale - 1.0
    return weight / scale


def scaled_rows(state: QuantState, scale: Tensor) -> QuantState:
    """The state with row r's scales divided by s_r: the grid of diag(s)⁻¹·Ŵ, the same codes and zero points."""
    return QuantState(state.codes, state.scales / scale.to(state.scales).unsqueeze(1), state.zeros, state.spec)


def plain(state: QuantState) -> QuantState:
    """An AWQ state without its input scale: the grid Q(W·diag s) the folded linear stores."""
    return QuantState(state.codes, state.scales, state.zeros, state.spec)


def shared_scale(states: dict[str, QuantState], group: list[str]) -> Tensor | None:
    """The input scale every linear of ``group`` carries (None when none has one); raises when they differ."""
    scales = [getattr(states.get(name), "input_scale", None) for name in group]
    if all(s is None for s in scales):
        return None
    first = scales[0]
    if first is None or any(s is None or not torch.equal(s, first) for s in scales):
        raise ValueError(f"the linears {group} carry different input scales: only a shared one can be folded")
    return first
