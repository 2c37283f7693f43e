"""Data-free runs: a method that reads only the weights (magnitude, RTN) skips the calibration path.

Such a method (``MethodSpec.data_free``) needs no capture of layer 0's inputs, no statistics and no
propagation: each linear of each decoder layer is solved from its weight alone and written back
through the journal, as the calibrated path writes it. The per-layer output error
‖f̂(x) − f(x)‖/‖f(x)‖ needs inputs, so it is not measured (every ``LayerDone`` carries None and the
views say "no calibration"); each linear's report keeps what needs no data: its sparsity, its bits when
quantized, and the weight error ‖Ŵ − W‖_F/‖W‖_F (``SublayerPruned.weight_rel_error``, which the heat-map
and the CLI table draw in place of the output-weighted ‖ΔW X‖/‖W X‖).

``calibrate="always"`` (``--calibrate always``) runs the calibrated path anyway, for the output errors (the
Lesson compares them across methods). Options that read the calibration activations put a run back on it too:
``--allocation owl`` (outlier ratios), ``--refine`` (DSnoT's input means), ``--permute`` (column norms).
"""

from __future__ import annotations

import time

import torch
from torch import nn

from toolkit.engine.linear import layer_done, on_device
from toolkit.engine.solve import prune_group
from toolkit.engine.state import EngineConfig, RunState
from toolkit.events import LayerStarted
from toolkit.methods.base import LinearStats, MethodSpec
from toolkit.models.layers import decoder_layers, layer_linears
from toolkit.spec.compression import Compression

NO_STATS = LinearStats(gram=torch.empty(0, 0), count=0)  # what a data-free solve is handed: nothing measured


def needs_calibration(spec: MethodSpec, compression: Compression, cfg: EngineConfig) -> bool:
    """Whether the run reads calibration activations: its method, or an option that scores with them."""
    if not spec.data_free or cfg.calibrate == "always":
        return True
    return not cfg.allocation.uniform or cfg.refine is not None or compression.permute or cfg.distributed


def prune_without_data(run: RunState, model: nn.Module) -> None:
    """Every linear of every decoder layer solved from its weight, in order; no input is ever computed."""
    layers = decoder_layers(model)
    with torch.no_grad():
        for index, layer in enumerate(layers):
            start = time.perf_counter()
            run.layer = index
            linears = layer_linears(layer)
            run.layer_module, run.layer_linears = layer, linears
            run.emit(LayerStarted(layer=index, num_layers=len(layers), groups=[[name] for name in linears]))
            with on_device(run, layer):
                for name in linears:
                    prune_group(run, linears, [name], NO_STATS)
            layer_done(run, len(layers), None, start)
            run.result.phases.append(run.timer.layer_done(index))
