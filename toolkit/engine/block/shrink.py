"""Physical removal of heads and channels from one decoder layer, through the WriteBack journal.

HF layout (``weight`` (out, in)). For kept query heads laid out by
:func:`toolkit.models.structure.slot_layout` (slots s = old head or a zero pad, chunks with one KV head):

    q'    = q rows of the slot heads (Dh rows each; pads are zero)        (S·Dh, D)
    k', v' = k, v rows of each chunk's KV head (a KV head may repeat)     (C·Dh, D)
    o'    = the compensated o columns of the slot heads (pads zero)       (D, S·Dh)
    gate', up' = kept rows;  down' = compensated down columns, kept only  (I', D), (D, I')

and the attention's n_rep (``num_key_value_groups``) becomes the chunk size (OPT: ``num_heads``
becomes S). Every Linear is replaced by a new one (``WriteBack.replace``) and every attribute is
set with ``WriteBack.set_attr``, so :meth:`WriteBack.restore` gives back the original modules and
shapes. ``remove=False`` writes same-shape Linears with the removed units zeroed instead (the
masked model; its logits equal the shrunk model's).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn

from toolkit.engine.writeback import WriteBack
from toolkit.models.structure import BlockView, SlotLayout, slot_layout


@dataclass
class LayerEdit:
    """What changes in one layer: kept query heads / channels (bool), new o/down weights and biases.

    ``o_weight`` (out, H·Dh) and ``down_weight`` (out, I) are full-width float32, zero on removed
    inputs; a bias of None leaves the module's bias as it is.
    """

    keep_heads: Tensor | None = None
    o_weight: Tensor | None = None
    o_bias: Tensor | None = None
    keep_channels: Tensor | None = None
    down_weight: Tensor | None = None
    down_bias: Tensor | None = None


def make_linear(weight: Tensor, bias: Tensor | None, like: nn.Linear) -> nn.Linear:
    """A new Linear holding ``weight`` (out, in) and ``bias`` in ``like``'s dtype and device."""
    out_features, in_features = weight.shape
    new = cast(nn.Linear, torch.nn.utils.skip_init(nn.Linear, in_features, out_features, bias=bias is not None,
                                                   device=like.weight.device, dtype=like.weight.dtype))
    with torch.no_grad():
        new.weight.copy_(weight)
        if bias is not None:
            cast(Tensor, new.bias).copy_(bias)
    new.weight.requires_grad_(like.weight.requires_grad)
    return new


def _bias(module: nn.Linear) -> Tensor | None:
    return None if module.bias is None else module.bias.detach()


def _head_rows(weight: Tensor, heads: Tensor, head_dim: int) -> Tensor:
    """Rows of the given heads (−1 → zero rows), in order: (len(heads)·Dh, in) or (len·Dh,) for biases."""
    blocks = weight.reshape(-1, head_dim, *weight.shape[1:])[heads.clamp_min(0)]  # (n, Dh, ...)
    valid = (heads >= 0).to(weight.dtype).view(-1, *([1] * (blocks.dim() - 1)))
    return (blocks * valid).reshape(-1, *weight.shape[1:])


def _head_columns(weight: Tensor, heads: Tensor, head_dim: int) -> Tensor:
    """Columns of the given heads of ``weight`` (out, H·Dh) (−1 → zero columns): (out, len(heads)·Dh)."""
    return _head_rows(weight.T, heads, head_dim).T


def shrink_heads(view: BlockView, edit: LayerEdit, writeback: WriteBack, remove: bool) -> dict:
    """Replace q, k, v, o for the kept heads; returns the layer's head record (JSON-able)."""
    assert edit.keep_heads is not None and edit.o_weight is not None
    dh, n_rep = view.head_dim, view.n_rep
    q, k, v, o = (view.linear(r) for r in ("q", "k", "v", "o"))
    if remove:
        head_cost = q.weight[:dh].numel() + (dh if q.bias is not None else 0) + o.out_features * dh
        layout = slot_layout(edit.keep_heads.cpu(), n_rep, head_cost, 2 * (k.weight[:dh].numel() +
                                                                           (dh if k.bias is not None else 0)))
    else:  # same shapes, removed heads as zero slots, KV heads zeroed when no kept head reads them
        slots = torch.where(edit.keep_heads.cpu(), torch.arange(view.num_heads), -1)
        kv_used = edit.keep_heads.cpu().view(-1, n_rep).any(1)
        layout = SlotLayout(tuple(slots.tolist()), tuple(torch.where(kv_used, torch.arange(len(kv_used)),
                                                                     -1).tolist()), n_rep)
    slots = torch.tensor(layout.slots, device=q.weight.device)
    kv = torch.tensor(layout.kv, device=q.weight.device)
    new = {
        "q": make_linear(_head_rows(q.weight.detach(), slots, dh),
                         None if q.bias is None else _head_rows(q.bias.detach(), slots, dh), q),
        "k": make_linear(_head_rows(k.weight.detach(), kv, dh),
                         None if k.bias is None else _head_rows(k.bias.detach(), kv, dh), k),
        "v": make_linear(_head_rows(v.weight.detach(), kv, dh),
                         None if v.bias is None else _head_rows(v.bias.detach(), kv, dh), v),
        "o": make_linear(_head_columns(edit.o_weight.to(o.weight.device), slots, dh),
                         _bias(o) if edit.o_bias is None else edit.o_bias, o),
    }
    for role, module in new.items():
        writeback.replace(*view.parent(role), module)
    if view.family.groups_attr is not None:
        writeback.set_attr(view.attn, view.family.groups_attr, layout.group)
    if view.family.heads_attr is not None:
        writeback.set_attr(view.attn, view.family.heads_attr, layout.num_heads)
    return {"num_heads": layout.num_heads, "num_kv_heads": layout.num_kv_heads, "heads_kept": list(layout.slots),
            "kv_heads": list(layout.kv), "kv_group": layout.group}


def shrink_channels(view: BlockView, edit: LayerEdit, writeback: WriteBack, remove: bool) -> dict:
    """Replace gate, up, down for the kept channels; returns the layer's channel record (JSON-able)."""
    assert edit.keep_channels is not None and edit.down_weight is not None
    keep = edit.keep_channels.to(view.linear("up").weight.device)
    index = torch.nonzero(keep).flatten() if remove else torch.arange(len(keep), device=keep.device)
    scale = torch.ones(len(index), device=keep.device) if remove else keep.float()
    down = view.linear("down")
    new = {"down": make_linear(edit.down_weight.to(down.weight.device)[:, index],
                               _bias(down) if edit.down_bias is None else edit.down_bias, down)}
    for role in ("gate", "up"):
        if view.has(role):
            lin = view.linear(role)
            rows = lin.weight.detach()[index] * scale.to(lin.weight.dtype).unsqueeze(1)
            bias = None if lin.bias is None else lin.bias.detach()[index] * scale.to(lin.weight.dtype)
            new[role] = make_linear(rows, bias, lin)
    for role, module in new.items():
        writeback.replace(*view.parent(role), module)
    mlp = view.mlp
    if remove and mlp is not None and hasattr(mlp, "intermediate_size"):
        writeback.set_attr(mlp, "intermediate_size", len(index))
    return {"intermediate_size": int(keep.sum()) if remove else len(keep),
            "channels_kept": torch.nonzero(keep).flatten().tolist()}


def set_uniform_config(model: nn.Module, views: list[BlockView], removed: bool, writeback: WriteBack) -> str:
    """When every layer has the same head, KV-head and channel counts, write them into ``model.config``.

    Sets ``num_attention_heads``, ``num_key_value_heads``, an explicit ``head_dim`` and the
    intermediate size (OPT: ``ffn_dim``), so ``save_pretrained`` writes a standard config. Head
    counts the family's config cannot state (OPT without ``head_dim``; Llama's check
    ``hidden_size % num_attention_heads == 0``) are left out. Returns "" when the config now
    describes the model or there is nothing to do, else a sentence saying why it does not.
    """
    shapes = {(v.num_heads, v.num_kv_heads, v.intermediate) for v in views}
    if not removed:
        return ""
    if len(shapes) != 1:
        return "layers keep different counts: the checkpoint needs the per-layer format"
    (heads, kv_heads, intermediate), = shapes
    config: Any = model.config  # a transformers PretrainedConfig
    family = views[0].family
    head_updates = {"num_attention_heads": heads}
    if hasattr(config, "num_key_value_heads"):
        head_updates["num_key_value_heads"] = kv_heads
    if family.config_head_dim:
        head_updates["head_dim"] = views[0].head_dim
    problem = _unstatable(config, head_updates, family.config_head_dim or heads * views[0].head_dim ==
                          config.hidden_size)
    updates = {} if problem else head_updates
    if intermediate and hasattr(config, family.config_intermediate):
        updates[family.config_intermediate] = intermediate
    for attr, value in updates.items():
        if getattr(config, attr, None) != value:
            writeback.set_attr(config, attr, value)
    return problem


def _unstatable(config: Any, updates: dict[str, int], can_state: bool) -> str:
    """Why the config cannot hold ``updates`` ("" when it can), checked on a copy."""
    if not can_state:
        return f"a {type(config).__name__} cannot state head_dim: the checkpoint needs the per-layer format"
    try:  # transformers ≥ 5 validates configs through huggingface_hub's strict dataclasses
        from huggingface_hub.errors import StrictDataclassError as invalid
    except ImportError:
        invalid = ValueError
    trial = copy.deepcopy(config)
    for attr, value in updates.items():
        setattr(trial, attr, value)
    try:
        if hasattr(trial, "validate"):
            trial.validate()
    except (ValueError, TypeError, invalid) as exc:
        return f"{type(config).__name__} refuses {updates['num_attention_heads']} heads ({exc}); " \
               "the checkpoint needs the per-layer format"
    return ""
