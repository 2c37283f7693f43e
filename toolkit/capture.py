"""Capture the inputs of decoder layer 0 and run single layers on stored inputs (STYLE R5).

The capture keeps **all** arguments the model passes to a decoder layer (attention masks, position
ids, rotary ``position_embeddings`` …) per batch, and stops the forward pass with a private
exception so nothing after layer 0 runs. Only the modules outside the decoder layers are moved to
the device for the capture; each layer is moved there only while it is processed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn


class _StopForward(Exception):
    """Ends the model's forward pass at layer 0."""


@dataclass
class LayerInputs:
    """Hidden states per batch plus the other arguments the model gave the layer."""

    hidden: list[Tensor]
    args: list[tuple]
    kwargs: list[dict[str, Any]]

    def replace_hidden(self, hidden: list[Tensor]) -> LayerInputs:
        """Same side arguments, new hidden states (the outputs of the previous layer)."""
        return LayerInputs(hidden=hidden, args=self.args, kwargs=self.kwargs)

    def to(self, device: torch.device) -> LayerInputs:
        """The same inputs on ``device`` (hidden states and every tensor among the side arguments)."""
        return LayerInputs(hidden=[h.to(device) for h in self.hidden], args=[_move(a, device) for a in self.args],
                           kwargs=[_move(k, device) for k in self.kwargs])

    def head(self, windows: int) -> LayerInputs:
        """The first ``windows`` windows of a single-batch capture.

        Side arguments whose leading dimension is the batch (per-window attention masks) are
        sliced with it; the others (rotary tables and position ids of shape (1, …)) are shared.
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

        return LayerInputs(hidden=[self.hidden[0][:windows]], args=[cut(self.args[0])], kwargs=[cut(self.kwargs[0])])


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


@contextlib.contextmanager
def outside_layers_on(model: nn.Module, layers: nn.ModuleList, device: torch.device) -> Iterator[None]:
    """Temporarily move every parameter and buffer that is not in ``layers`` to ``device``."""
    inside = {id(t) for t in layers.parameters()} | {id(t) for t in layers.buffers()}
    moved: list[tuple[Tensor, torch.device]] = []
    for tensor in list(model.parameters()) + list(model.buffers()):
        if id(tensor) not in inside and tensor.device != device:
            moved.append((tensor, tensor.device))
            tensor.data = tensor.data.to(device)
    try:
        yield
    finally:
        for tensor, home in moved:
            tensor.data = tensor.data.to(home)


def capture_layer0(
    model: nn.Module, layers: nn.ModuleList, windows: Tensor, device: torch.device, batch_size: int
) -> LayerInputs:
    """Run the model on ``windows`` (num, seq) in batches and keep what layer 0 receives."""
    captured = LayerInputs(hidden=[], args=[], kwargs=[])

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
        hidden = args[0] if args else kwargs.pop("hidden_states")
        captured.hidden.append(hidden.detach())
        captured.args.append(tuple(args[1:]))
        captured.kwargs.append({k: v for k, v in kwargs.items() if k not in ("past_key_values", "past_key_value")})
        raise _StopForward

    handle = layers[0].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with outside_layers_on(model, layers, device), torch.no_grad():
            for start in range(0, windows.shape[0], batch_size):
                batch = windows[start : start + batch_size].to(device)
                try:
                    model(input_ids=batch, use_cache=False)
                except _StopForward:
                    pass
    finally:
        handle.remove()
    return captured


def run_layer(layer: nn.Module, inputs: LayerInputs, index: int) -> Tensor:
    """Output hidden states of ``layer`` for batch ``index`` (tuples from older layers unwrapped)."""
    out = layer(inputs.hidden[index], *inputs.args[index], **inputs.kwargs[index])
    return out[0] if isinstance(out, tuple) else out
