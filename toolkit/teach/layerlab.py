"""One decoder layer through every method: the teaching path behind ``notebooks/02``.

:class:`LayerLab` loads a model and its calibration / evaluation windows once, then prunes only
the first ``upto + 1`` decoder layers with any registered method (the engine stops after layer
``upto``; later layers stay dense) and measures the perplexity of that partly pruned model. The
weights are put back before the next method, so methods are compared on identical inputs in
seconds instead of the minutes a whole model takes on a CPU.

A :class:`LayerResult` holds the run's events (replay them with :func:`toolkit.live.view.fold`), the
keep-masks (and quantization states) of the pruned linears and the perplexity. Nothing is written
to the run store. Every change goes through a :class:`~toolkit.engine.writeback.WriteBack` journal that
is undone afterwards, so a method that changes shapes is undone as well as one that writes weights.

The one-layer scope is not (yet) part of :class:`toolkit.api.RunConfig`; this module drives
:func:`toolkit.engine.prune.prune_layers` directly, with the engine's own cancellation point as the stop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from toolkit.data.text import CalibSpec, calibration_windows, eval_windows, load_tokens
from toolkit.engine.prune import check_targets, prune_layers
from toolkit.engine.state import EngineConfig
from toolkit.engine.writeback import WriteBack
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.evaluation.perplexity import perplexity
from toolkit.events import Event, LayerDone
from toolkit.methods import get_method
from toolkit.methods.quant_grid import QuantState
from toolkit.models.layers import decoder_layers
from toolkit.models.load import bos_id, load_model
from toolkit.run.checks import check_context
from toolkit.runtime.devices import resolve_device
from toolkit.spec.compression import parse_compression


@dataclass
class LayerResult:
    """What one method did to layers 0..upto.

    Events, keep-masks ``{(layer, linear): (out, in) bool}``, quantization states of the quantized linears,
    ppl.
    """

    method: str
    sparsity: str  # the compression's label (``50%``, ``2:4+int4:g128``)
    options: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    keep_masks: dict[tuple[int, str], np.ndarray] = field(default_factory=dict)
    quant_states: dict[tuple[int, str], QuantState] = field(default_factory=dict)
    ppl: float = float("nan")
    seconds: float = 0.0


class LayerLab:
    """A model held in memory for pruning its first layers with one method after another."""

    def __init__(self, model: str = "smollm2-135m", *, upto: int = 0, device: str = "auto",
                 **protocol: Any) -> None:
        """Load ``model``; ``protocol``: nsamples, seqlen, seed, eval_seqlen, eval_windows (RunConfig names)."""
        settings = {"nsamples": 32, "seqlen": 512, "seed": 0, "eval_seqlen": 512, "eval_windows": 16, **protocol}
        self.loaded = load_model(model)
        check_context(self.loaded, int(settings["seqlen"]), int(settings["eval_seqlen"]))
        self.layers = decoder_layers(self.loaded.model)
        if not 0 <= upto < len(self.layers):
            raise ToolkitError(f"upto must be a layer index in 0..{len(self.layers) - 1}, got {upto}")
        self.upto = upto
        self.device = resolve_device(device)
        bos = bos_id(self.loaded)
        calib = CalibSpec("wiki", int(settings["nsamples"]), int(settings["seqlen"]), int(settings["seed"]))
        self.calibration = calibration_windows(load_tokens("wiki", "train", self.loaded.codec), calib, bos)
        self.test = eval_windows(load_tokens("wiki", "test", self.loaded.codec), int(settings["eval_seqlen"]),
                                 settings["eval_windows"], bos)
        self._journal = WriteBack()
        self.dense_ppl = perplexity(self.loaded.model, self.test, self.device)

    @property
    def linears(self) -> list[str]:
        """Names of the linears of one decoder layer."""
        return [name for name, module in self.layers[0].named_modules() if isinstance(module, torch.nn.Linear)]

    def prune(self, method: str, sparsity: str | None = "50%", options: dict[str, Any] | None = None, *,
              quant: str | None = None, unit: str | None = None) -> LayerResult:
        """Compress layers 0..upto with ``method``, measure perplexity, restore the dense model.

        ``sparsity``, ``quant`` and ``unit`` are as on the command line.
        """
        spec, compression = get_method(method), parse_compression(sparsity, quant, unit)
        check_targets(self.loaded.model, spec, compression)
        result = LayerResult(method=method, sparsity=compression.label, options=dict(options or {}))
        done = [False]

        def emit(event: Event) -> None:
            result.events.append(event)
            if isinstance(event, LayerDone) and event.layer >= self.upto:
                done[0] = True  # the engine stops at its next cancellation point, before layer upto + 1

        def on_mask(layer: int, name: str, keep: torch.Tensor) -> None:
            result.keep_masks[(layer, name)] = keep.numpy().astype(bool)

        def on_quant(layer: int, name: str, state: QuantState) -> None:
            result.quant_states[(layer, name)] = state

        start = time.perf_counter()
        try:
            prune_layers(self.loaded.model, self.calibration, spec, compression, spec.make_config(options or {}),
                         cfg=EngineConfig(device=str(self.device), restore_on_failure=False), emit=emit,
                         cancelled=lambda: done[0], on_mask=on_mask, on_quant=on_quant, writeback=self._journal)
        except RunCancelled:
            if not done[0]:
                self.restore()
                raise
        except BaseException:
            self.restore()
            raise
        try:
            result.seconds = time.perf_counter() - start
            result.ppl = perplexity(self.loaded.model, self.test, self.device)
        finally:
            self.restore()
        return result

    def restore(self) -> None:
        """Undo every change of the last :meth:`prune` (weights, swapped modules, attributes)."""
        self._journal.restore()
