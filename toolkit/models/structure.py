"""Per-family structure adapter: where a decoder layer keeps its attention heads and MLP channels.

The structural units of block-scope methods (Numerical Pruning §3.1, "internal computation
alignment"; FLAP; Wanda-sp), in HF layout (``weight`` is (out, in)):

- **query head** h: rows [h·Dh, (h+1)·Dh) of q_proj and the same columns of o_proj; it reads
  **KV head** h // n_rep (rows of k_proj and v_proj), n_rep = H / H_kv as in HF's ``repeat_kv``;
- **MLP channel** j: row j of gate_proj and up_proj (fc1 of a non-gated MLP) and column j of
  down_proj (fc2).

A :class:`Family` names those modules inside a decoder layer; a :class:`BlockView` resolves them
for one layer and reads every count from the current Linear shapes (so a shrunk layer is described
correctly). :func:`slot_layout` maps kept query heads onto KV heads so that no query head is ever
left without its KV head. Unknown families raise a :class:`ToolkitError` naming the known ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn

from toolkit.errors import ToolkitError
from toolkit.spec.compression import Unit

ROLES = ("q", "k", "v", "o", "gate", "up", "down")
ATTN_ROLES = ("q", "k", "v", "o")
MLP_ROLES = ("gate", "up", "down")


@dataclass(frozen=True)
class Family:
    """Where the structural modules of one model family live inside a decoder layer.

    ``mlp = None`` marks a family without a dense MLP (mixture of experts): heads only.
    ``heads_attr`` is an attention attribute holding the per-layer head count that the forward
    reads (OPT's ``num_heads``); ``groups_attr`` holds n_rep (``num_key_value_groups``).
    ``config_head_dim`` says whether the HF config can state an explicit ``head_dim``.
    """

    name: str
    model_types: tuple[str, ...]
    attn: str = "self_attn"
    q: str = "q_proj"
    k: str = "k_proj"
    v: str = "v_proj"
    o: str = "o_proj"
    mlp: str | None = "mlp"
    gate: str | None = "gate_proj"
    up: str = "up_proj"
    down: str = "down_proj"
    heads_attr: str | None = None
    groups_attr: str | None = "num_key_value_groups"
    config_intermediate: str = "intermediate_size"
    config_head_dim: bool = True

    def units(self) -> tuple[Unit, ...]:
        """The units a layer of this family can lose."""
        return (Unit.HEADS,) if self.mlp is None else (Unit.HEADS, Unit.CHANNELS, Unit.HEADS_CHANNELS)


LLAMA_STYLE = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_text", "granite", "olmo",
               "olmo2")
FAMILIES = (
    Family("Llama-style (Llama, Mistral, Qwen2/3, Gemma 1/2/3, Granite, OLMo)", LLAMA_STYLE),
    Family("mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE; heads only)", ("mixtral", "qwen2_moe", "qwen3_moe"),
           mlp=None, gate=None),
    Family("OPT", ("opt",), o="out_proj", mlp="", gate=None, up="fc1", down="fc2", heads_attr="num_heads",
           groups_attr=None, config_intermediate="ffn_dim", config_head_dim=False),
)


def known_families() -> str:
    """The model types the adapter knows, for error messages."""
    return ", ".join(t for f in FAMILIES for t in f.model_types)


def family_of(model: nn.Module) -> Family:
    """The :class:`Family` of ``model`` from ``config.model_type``; raises for unknown families."""
    model_type = getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    raise ToolkitError(
        f"structured pruning does not know the {model_type!r} architecture: it removes heads and channels "
        f"of Llama/Qwen2/Mistral/Gemma-style decoders and OPT (model types: {known_families()})"
    )


def check_unit(family: Family, unit: Unit, model_type: str) -> None:
    """Raise a :class:`ToolkitError` when the family has no such unit (e.g. channels of an MoE MLP)."""
    if unit not in family.units():
        have = ", ".join(u.value for u in family.units())
        raise ToolkitError(f"{model_type} has no dense MLP channels (its MLP is a mixture of experts): "
                           f"--unit {unit.value} is not possible; its units: {have}")


def _get(root: nn.Module, path: str | None) -> nn.Module | None:
    if path is None:
        return None
    return root.get_submodule(path) if path else root


@dataclass
class BlockView:
    """The structural modules of one decoder layer, resolved through its :class:`Family`."""

    family: Family
    layer: nn.Module

    @property
    def attn(self) -> nn.Module:
        """The attention module."""
        module = _get(self.layer, self.family.attn)
        assert module is not None
        return module

    @property
    def mlp(self) -> nn.Module | None:
        """The MLP module (the layer itself for OPT; None for MoE)."""
        return _get(self.layer, self.family.mlp)

    def name(self, role: str) -> str:
        """Qualified name of ``role`` inside the layer (``self_attn.o_proj``)."""
        parent = self.family.attn if role in ATTN_ROLES else self.family.mlp
        attr = getattr(self.family, role)
        return f"{parent}.{attr}" if parent else attr

    def has(self, role: str) -> bool:
        """Whether the layer has a module for ``role`` (no gate in a non-gated MLP, no MLP in MoE)."""
        if role in MLP_ROLES and self.family.mlp is None:
            return False
        return getattr(self.family, role) is not None

    def parent(self, role: str) -> tuple[nn.Module, str]:
        """(module holding ``role``, attribute name): what :meth:`WriteBack.replace` needs."""
        holder = self.attn if role in ATTN_ROLES else self.mlp
        assert holder is not None and self.has(role)
        return holder, getattr(self.family, role)

    def linear(self, role: str) -> nn.Linear:
        """The Linear playing ``role``."""
        holder, attr = self.parent(role)
        module = getattr(holder, attr)
        if not isinstance(module, nn.Linear):
            raise ToolkitError(f"{self.name(role)} is a {type(module).__name__}, not a Linear: cannot shrink it")
        return module

    @property
    def head_dim(self) -> int:
        """Dh, from the attention module (unchanged by pruning)."""
        return int(cast(int, self.attn.head_dim))

    @property
    def num_heads(self) -> int:
        """Query heads H of this layer now."""
        return self.linear("q").out_features // self.head_dim

    @property
    def num_kv_heads(self) -> int:
        """KV heads H_kv of this layer now."""
        return self.linear("k").out_features // self.head_dim

    @property
    def n_rep(self) -> int:
        """Query heads per KV head."""
        return self.num_heads // self.num_kv_heads

    @property
    def intermediate(self) -> int:
        """MLP channels of this layer now (0 without a dense MLP)."""
        return self.linear("down").in_features if self.has("down") else 0

    def roles(self) -> tuple[str, ...]:
        """Every role this layer has."""
        return tuple(r for r in ROLES if self.has(r))

    def params(self, roles: tuple[str, ...] | None = None) -> int:
        """Weights + biases of the given roles (all of them by default)."""
        return sum(sum(p.numel() for p in self.linear(r).parameters()) for r in (roles or self.roles()))


def block_views(model: nn.Module, layers: nn.ModuleList) -> list[BlockView]:
    """One checked :class:`BlockView` per decoder layer."""
    family = family_of(model)
    views = [BlockView(family, layer) for layer in layers]
    for index, view in enumerate(views):
        try:
            view.attn.head_dim  # noqa: B018 - resolves the path and the attribute
            shapes_ok = view.linear("q").out_features % view.head_dim == 0 and view.num_heads % view.num_kv_heads == 0
        except AttributeError as exc:
            raise ToolkitError(f"layer {index}: not a {family.name} decoder layer ({exc})") from None
        if not shapes_ok:
            raise ToolkitError(f"layer {index}: q_proj/k_proj widths are not whole heads of {view.head_dim}")
    return views


def head_units(view: BlockView, gqa: str) -> Tensor:
    """Unit index of every query head (H,): its KV group (``gqa="groups"``) or itself (``"query"``)."""
    heads = torch.arange(view.num_heads)
    return heads // view.n_rep if gqa == "groups" else heads


def unit_costs(view: BlockView, gqa: str) -> tuple[int, int]:
    """Parameters one head unit and one MLP channel own (weights + biases), from the real shapes.

    groups: n_rep query heads (q rows + o columns) + their KV head (k, v rows):
    (2·n_rep + 2)·D·Dh, = 4·D·Dh without GQA; query: 2·D·Dh (q rows + o columns; 4·D·Dh without GQA).
    channel: gate row + up row + down column = 3·D (2·D for a non-gated MLP).
    """
    dh = view.head_dim

    def rows(role: str, count: int) -> int:
        lin = view.linear(role)
        return count * (lin.in_features + (1 if lin.bias is not None else 0))

    q_cost = rows("q", dh) + dh * view.linear("o").out_features
    kv_cost = rows("k", dh) + rows("v", dh)
    head = q_cost * view.n_rep + kv_cost if gqa == "groups" or view.n_rep == 1 else q_cost
    if not view.has("down"):
        return head, 0
    channel = rows("up", 1) + view.linear("down").out_features + (rows("gate", 1) if view.has("gate") else 0)
    return head, channel


@dataclass(frozen=True)
class SlotLayout:
    """How kept query heads map onto (possibly repeated) KV heads after removal.

    ``slots`` lists, for every query head of the new layer, the old query head it is (−1: a zero
    padding head); ``kv`` lists the old KV head behind each chunk of ``group`` consecutive slots.
    """

    slots: tuple[int, ...]
    kv: tuple[int, ...]
    group: int

    @property
    def num_heads(self) -> int:
        """Query heads of the new layer."""
        return len(self.slots)

    @property
    def num_kv_heads(self) -> int:
        """KV heads of the new layer."""
        return len(self.kv)


def slot_layout(keep_heads: Tensor, n_rep: int, head_cost: int, kv_cost: int) -> SlotLayout:
    """The cheapest exact layout for the kept query heads ``keep_heads`` (H,) bool.

    HF attention gives query slot s the KV head s // group. Kept heads of KV group g (c_g of
    them) are cut into chunks of ``group`` slots, each chunk with its own copy of KV head g; the
    last chunk is padded with zero heads (zero q rows and o columns: they add nothing). Every
    ``group`` from 1 to max c_g is exact; the one with the fewest parameters
    Σ_g ⌈c_g/group⌉·(kv_cost + group·head_cost) wins. With whole groups kept (``gqa=groups``)
    that is the old ``n_rep`` and nothing is padded or copied.
    """
    per_group = keep_heads.view(-1, n_rep)  # (H_kv, n_rep)
    counts = per_group.sum(1).tolist()
    widest = max(counts)
    assert widest > 0, "a layer keeps at least one head"

    def cost(group: int) -> int:
        return sum(math.ceil(c / group) * (kv_cost + group * head_cost) for c in counts)

    group = min(range(1, widest + 1), key=lambda g: (cost(g), -g))
    slots: list[int] = []
    kv: list[int] = []
    for g, count in enumerate(counts):
        kept = (torch.nonzero(per_group[g]).flatten() + g * n_rep).tolist()
        for start in range(0, count, group):
            chunk = kept[start : start + group]
            slots.extend(chunk + [-1] * (group - len(chunk)))
            kv.append(g)
    return SlotLayout(tuple(slots), tuple(kv), group)
