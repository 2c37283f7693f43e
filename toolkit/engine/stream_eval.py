"""Perplexity of a checkpoint larger than host memory: its decoder layers streamed over the evaluation windows.

The protocol and the numbers are :func:`toolkit.evaluation.perplexity.perplexity`'s (the same windows, batches,
output head in chunks of positions, the same check of that head against the model's own logits); only the
order of the work differs. With the decoder layers on the meta device
(:func:`toolkit.models.stream.open_streamed`), layer 0's inputs are captured for every batch of windows
(:func:`toolkit.engine.capture.capture_layer_inputs`: the model's own forward builds each layer's masks and
rotary tables), then each layer in turn is loaded from the shards, run on every batch and released. Last, the
model's own forward runs once more per batch with every decoder layer replaced by a replayer (the last one
returns that batch's final hidden states), so the final norm, the head and any soft-capping are the model's own.

Host memory: one decoder layer, the hidden states of every evaluation window (windows × seq × hidden in the
model's dtype) and what lies outside the decoder layers (embeddings, head).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from toolkit.engine.capture import capture_layer_inputs, outside_layers_on, recording_layers, run_layer
from toolkit.errors import RunCancelled
from toolkit.evaluation.perplexity import _head_matches, _own_window_nlls, _split_head, _window_nlls, perplexity_of
from toolkit.models.stream import StreamedModel
from toolkit.runtime.placement import placed

log = logging.getLogger(__name__)


def final_hidden_states(streamed: StreamedModel, windows: Tensor, device: torch.device, batch_size: int,
                        cancelled: Callable[[], bool] = lambda: False,
                        progress: Callable[[int], None] = lambda layers_done: None) -> list[Tensor]:
    """The last decoder layer's outputs for every batch of ``windows`` (num, seq), one layer on the host at a time.

    Every layer is released (back on meta) after it ran, also on failure or cancel; ``progress(i + 1)``
    follows layer i.
    """
    model, layers = streamed.loaded.model, streamed.layers
    inputs = capture_layer_inputs(model, layers, windows, device, batch_size)
    for index, layer in enumerate(layers):
        if cancelled():
            raise RunCancelled("cancelled")
        streamed.load_layer(index, layer)
        try:
            with placed(layer, device):
                hidden = [run_layer(layer, inputs, b) for b in range(len(inputs.hidden))]
        finally:
            streamed.release_layer(index, layer)
        inputs = inputs.next_layer(hidden)
        progress(index + 1)
    return inputs.hidden


@contextlib.contextmanager
def replaying(layers: nn.ModuleList, final: Tensor) -> Iterator[None]:
    """Decoder layers that pass their input on, the last returning ``final`` (its first rows, as many as asked)."""
    last = len(layers) - 1

    def replay(index: int, *args: Any, **kwargs: Any) -> Tensor:
        hidden = args[0] if args else kwargs["hidden_states"]
        return final[: hidden.shape[0]] if index == last else hidden

    with recording_layers(layers, replay):
        yield


def streamed_perplexity(
    streamed: StreamedModel,
    windows: Tensor,
    device: torch.device,
    batch_size: int = 4,
    progress: Callable[[int, int], None] = lambda done, total: None,
    cancelled: Callable[[], bool] = lambda: False,
) -> float:
    """exp(mean window NLL) of the streamed checkpoint on ``windows`` (num, seq) int64, as ``perplexity`` computes it.

    ``progress(done, total)`` counts windows as ``perplexity`` does: the share of the decoder layers run so
    far, then all of them once scored. Raises :class:`NumericalError` on a non-finite loss and
    :class:`RunCancelled` when ``cancelled()`` turns true.
    """
    model, layers = streamed.loaded.model, streamed.layers
    nlls: list[float] = []
    total = windows.shape[0]
    progress(0, total)
    with torch.no_grad():
        finals = final_hidden_states(streamed, windows, device, batch_size, cancelled,
                                     lambda done: progress(total * done // (len(layers) + 1), total))
        split = _split_head(model)
        with outside_layers_on(model, layers, device), contextlib.ExitStack() as stack:
            if split is not None:
                stack.enter_context(placed(split[1], device))  # the head, which the capture leaves where it is
            for b, start in enumerate(range(0, windows.shape[0], batch_size)):
                batch, final = windows[start : start + batch_size].to(device), finals[b]
                with replaying(layers, final):
                    if split is not None and b == 0 and not _head_matches(model, *split, batch[:1]):
                        log.warning("%s: the output head is not lm_head (+ soft-capping); scoring one window at a "
                                    "time through the model's own forward", type(model).__name__)
                        split = None
                    if split is not None:
                        nlls.extend(_window_nlls(model, *split, batch).tolist())
                        continue
                for row, window in enumerate(batch.split(1)):
                    with replaying(layers, final[row : row + 1]):
                        nlls.extend(_own_window_nlls(model, window).tolist())
    progress(total, total)
    return perplexity_of(nlls)
