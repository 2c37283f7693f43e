"""Capture what the model gives each decoder layer, and run single layers on stored inputs (CONTRIBUTING.md R5).

The side inputs of a decoder layer (attention mask, position ids, rotary ``position_embeddings``,
cache position …) are **not** the same for every layer: Gemma-2/3 give their sliding-window
layers a banded mask and a local rotary table, and their full-attention layers a causal mask and
a global rotary table. Replaying layer 0's side inputs for every layer silently computes wrong
activations from the first layer of another kind on. So the capture runs the model's own forward
once per batch with every decoder layer **skipped** (its ``forward`` replaced by a recorder that
keeps its arguments and returns its input hidden states unchanged): the model builds each layer's
masks and rotary tables exactly as it would, no layer computes anything, and the pass stops at
the last layer (nothing after it, such as ``lm_head``, runs).

Layers of one kind receive the very same objects (or equal ones), so each batch keeps one
:class:`SideInputs` per kind and every layer refers to its kind's: memory grows with the number
of kinds (two for Gemma-3), not with the number of layers. Only the modules outside the decoder
layers are moved to the device for the capture; each layer is moved there only while it runs.

The recorder returns a plain tensor, as every decoder layer of transformers ≥ 5 does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from toolkit.errors import ToolkitError
from toolkit.runtime.placement import move_, restore_

_DROPPED = ("past_key_values", "past_key_value")  # use_cache=False: no cache is carried between layers


class _StopForward(Exception):
    """Ends the model's forward pass once the last decoder layer was recorded."""


@dataclass(frozen=True)
class SideInputs:
    """What the model gives a decoder layer besides the hidden states (positional and keyword)."""

    args: tuple
    kwargs: dict[str, Any]


@dataclass
class LayerInputs:
    """The inputs of decoder layer ``layer``: hidden states per batch plus every layer's side inputs.

    ``sides[b][i]`` is what the model's own forward gives layer ``i`` in batch ``b``; layers of one
    kind share one object, so ``sides`` costs one entry per kind and batch.
    """

    hidden: list[Tensor]
    sides: list[list[SideInputs]]
    layer: int = 0
    first: int = 0  # the layer ``sides[b][0]`` belongs to (a trimmed copy, see :meth:`only`)

    def side(self, batch: int) -> SideInputs:
        """The side inputs of this layer in batch ``batch``."""
        return self.sides[batch][self.layer - self.first]

    def next_layer(self, hidden: list[Tensor]) -> LayerInputs:
        """The inputs of the next layer: its own side inputs, ``hidden`` (this layer's outputs)."""
        return LayerInputs(hidden=hidden, sides=self.sides, layer=self.layer + 1, first=self.first)

    def only(self) -> LayerInputs:
        """These inputs with only this layer's side inputs (what another process needs to run it)."""
        return LayerInputs(hidden=self.hidden, sides=[[s[self.layer - self.first]] for s in self.sides],
                           layer=self.layer, first=self.layer)

    def to(self, device: torch.device) -> LayerInputs:
        """The same inputs on ``device`` (hidden states and every tensor among the side inputs)."""
        return LayerInputs(hidden=[h.to(device) for h in self.hidden],
                           sides=[_map_distinct(s, lambda side: _map_side(side, lambda v: _move(v, device)))
                                  for s in self.sides], layer=self.layer, first=self.first)

    def head(self, windows: int) -> LayerInputs:
        """The first ``windows`` windows of a single-batch capture.

        Side inputs whose leading dimension is the batch (per-window attention masks) are sliced
        with it; the others (rotary tables and position ids of shape (1, …)) are shared.
        """
        assert len(self.hidden) == 1, "head() is for single-batch captures"
        batch = self.hidden[0].shape[0]
        if windows >= batch:
            return self

        def cut(value: Any) -> Any:
            if isinstance(value, Tensor):
                return value[:windows] if value.dim() > 0 and value.shape[0] == batch else value
            if isinstance(value, tuple | list):
                return type(value)(cut(v) for v in value)
            if isinstance(value, dict):
                return {k: cut(v) for k, v in value.items()}
            return value

        sides = _map_distinct(self.sides[0], lambda side: _map_side(side, cut))
        return LayerInputs(hidden=[self.hidden[0][:windows]], sides=[sides], layer=self.layer, first=self.first)


def _map_side(side: SideInputs, fn: Callable[[Any], Any]) -> SideInputs:
    return SideInputs(args=tuple(fn(a) for a in side.args), kwargs={k: fn(v) for k, v in side.kwargs.items()})


def _map_distinct(sides: list[SideInputs], fn: Callable[[SideInputs], SideInputs]) -> list[SideInputs]:
    """``fn`` applied once per distinct object, so layers that shared one still share the result."""
    done: dict[int, SideInputs] = {}
    for side in sides:
        if id(side) not in done:
            done[id(side)] = fn(side)
    return [done[id(side)] for side in sides]


def _move(value: Any, device: torch.device) -> Any:
    if isinstance(value, Tensor):
        return value.to(device)
    if isinstance(value, tuple):
        return tuple(_move(v, device) for v in value)
    if isinstance(value, list):
        return [_move(v, device) for v in value]
    if isinstance(value, dict):
        return {k: _move(v, device) for k, v in value.items()}
    return value


def _same(a: Any, b: Any) -> bool:
    """Whether two side arguments are the same object or equal (tensors: shape, dtype and values)."""
    if a is b:
        return True
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return (isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape and a.dtype == b.dtype
                and a.device == b.device and bool(torch.equal(a, b)))
    if isinstance(a, tuple | list):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, bool | int | float | str | None):
        return type(a) is type(b) and a == b
    return False


def _shared(side: SideInputs, distinct: list[SideInputs]) -> SideInputs:
    """``side`` itself when new, else the equal entry of ``distinct`` (which then serves both layers)."""
    for seen in distinct:
        if _same(seen.args, side.args) and _same(seen.kwargs, side.kwargs):
            return seen
    distinct.append(side)
    return side


@contextlib.contextmanager
def outside_layers_on(model: nn.Module, layers: nn.ModuleList, device: torch.device,
                      dtype: torch.dtype | None = None) -> Iterator[None]:
    """Temporarily move every parameter and buffer that is not in ``layers`` to ``device``.

    Floating ones are cast to ``dtype`` when given, so the hidden states and the side inputs come in
    the dtype the layers are held in on the device.
    """
    inside = {id(t) for t in layers.parameters()} | {id(t) for t in layers.buffers()}
    inside |= _unused_head(model)
    outside = [t for t in list(model.parameters()) + list(model.buffers()) if id(t) not in inside]
    moved = move_(outside, device, dtype)
    try:
        yield
    finally:
        restore_(moved)


def _unused_head(model: nn.Module) -> set[int]:
    """The output head's weight when it is not the input embedding's too: the capture stops before it runs."""
    get_out = getattr(model, "get_output_embeddings", None)
    get_in = getattr(model, "get_input_embeddings", None)
    head = get_out() if callable(get_out) else None
    embed = get_in() if callable(get_in) else None
    weight = getattr(head, "weight", None)
    if not isinstance(weight, Tensor) or weight is getattr(embed, "weight", None):
        return set()
    return {id(weight)}


@contextlib.contextmanager
def recording_layers(layers: nn.ModuleList, record: Callable[..., Tensor]) -> Iterator[None]:
    """Replace each layer's ``forward`` by ``record(index, *args, **kwargs)``; put it back after."""
    saved = [layer.__dict__.get("forward") for layer in layers]  # accelerate may have set one
    for index, layer in enumerate(layers):
        layer.forward = lambda *args, _index=index, **kwargs: record(_index, *args, **kwargs)
    try:
        yield
    finally:
        for layer, forward in zip(layers, saved, strict=True):
            if forward is None:
                del layer.forward
            else:
                layer.forward = forward


def capture_layer_inputs(
    model: nn.Module, layers: nn.ModuleList, windows: Tensor, device: torch.device, batch_size: int,
    dtype: torch.dtype | None = None,
) -> LayerInputs:
    """Run the model on ``windows`` (num, seq) in batches and keep the decoder layers' inputs.

    Keeps layer 0's hidden states and every layer's side inputs (the layers themselves are skipped, see the
    module docstring), in ``dtype`` (the dtype the layers are held in on the device; None: the model's).

    Raises :class:`ToolkitError` when the model's forward does not call every decoder layer.
    """
    captured = LayerInputs(hidden=[], sides=[])
    distinct: list[SideInputs] = []  # of the current batch

    def record(index: int, *args: Any, **kwargs: Any) -> Tensor:
        hidden = args[0] if args else kwargs.pop("hidden_states")
        if index == 0:
            captured.hidden.append(hidden.detach())
            captured.sides.append([])
            distinct.clear()
        side = SideInputs(tuple(args[1:]), {k: v for k, v in kwargs.items() if k not in _DROPPED})
        captured.sides[-1].append(_shared(side, distinct))
        if index == len(layers) - 1:
            raise _StopForward
        return hidden

    with recording_layers(layers, record), outside_layers_on(model, layers, device, dtype), torch.no_grad():
        for batch, start in enumerate(range(0, windows.shape[0], batch_size)):
            with contextlib.suppress(_StopForward):
                model(input_ids=windows[start : start + batch_size].to(device), use_cache=False)
            if len(captured.sides) != batch + 1 or len(captured.sides[-1]) != len(layers):
                raise ToolkitError(f"{type(model).__name__}'s forward did not call each of its {len(layers)} "
                                   "decoder layers once; this architecture is not supported")
    return captured


def run_layer(layer: nn.Module, inputs: LayerInputs, index: int) -> Tensor:
    """Output hidden states of ``layer`` (decoder layer ``inputs.layer``) for batch ``index``.

    Tuples returned by older layers are unwrapped.
    """
    side = inputs.side(index)
    out = layer(inputs.hidden[index], *side.args, **side.kwargs)
    return out[0] if isinstance(out, tuple) else out
