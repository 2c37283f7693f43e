"""Depth pruning in the block engine: score every decoder layer in one pass, remove whole layers.

``prune_depth`` is what :func:`toolkit.engine.block.driver.prune_blocks` runs for ``--method depth``
(the scores and the choice: :mod:`toolkit.methods.block.depth`):

1. **Score pass** (the dense model, layer by layer on the calibration windows, dense activations
   propagate): for every layer l and token t, cos(x_l,t, x_{l+1},t) and ‖x_{l+1} − x_l‖², ‖x_{l+1}‖²
   are summed (block influence, the error of skipping the layer); under ``score=angular`` the
   hidden states of the last n + 1 layer boundaries are kept (on the CPU) to sum
   arccos(cos(x_l, x_{l+n}))/π for every block start l. Nothing else of the activations is kept.
2. **Choice**: the n layers of lowest block influence, or the n consecutive layers of smallest
   angular distance (``DepthScored``).
3. **Removal** (through the WriteBack journal, undone on failure or cancel): the decoder
   ModuleList is replaced by one of the kept layers; every ``layer_idx`` inside a kept layer
   (attention's, used by the KV cache; the layer's own) becomes its new position; the (text)
   config's ``num_hidden_layers`` and its per-layer attributes follow (:func:`shorten_config`).
   The model stays in its dtype, and its config describes it, so ``save_pretrained`` writes a
   standard checkpoint that plain ``AutoModelForCausalLM.from_pretrained`` loads.

Events: ``LayerStarted`` per layer as it is scored, ``DepthScored``, then per layer
``SublayerPruned`` for each linear (a removed layer's linears: sparsity 1, relative output
error 1, as their output is gone; a kept layer's: 0, 0) and ``LayerDone`` with the relative error
‖x_in − x_out‖/‖x_out‖ of skipping it (0 for a kept layer).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from toolkit.engine.block.result import BlockResult
from toolkit.engine.capture import LayerInputs, capture_layer_inputs, run_layer
from toolkit.engine.state import EngineConfig
from toolkit.engine.writeback import WriteBack
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import DepthScored, Event, LayerDone, LayerStarted, SublayerPruned
from toolkit.methods.base import MethodSpec
from toolkit.methods.block.depth import block_influence, check_count, choose_layers
from toolkit.models.layers import decoder_layers, get_weight, layer_linears
from toolkit.runtime.devices import resolve_device
from toolkit.spec.compression import Compression, Unit
from toolkit.spec.targets import Structured

# config attributes holding the index of a layer boundary: layers below it are of one kind
THRESHOLDS = ("max_window_layers", "first_k_dense_replace")
INDEX_LISTS = ("mlp_only_layers",)  # config attributes listing layer indices


def is_depth(spec: MethodSpec, compression: Compression) -> bool:
    """True when the run removes whole decoder layers (a method whose unit is ``layers``)."""
    return Unit.LAYERS in spec.units and compression.unit in (None, Unit.LAYERS)


def check_depth(model: nn.Module, spec: MethodSpec, compression: Compression) -> int:
    """The number of layers a depth run removes; a one-line :class:`ToolkitError` before any work.

    Refuses a target that is not ``structured:`` (n:m, unstructured), no layer or every layer,
    and a model whose decoder-layer list or config's layer count cannot be found.
    """
    target = compression.sparsity
    if not isinstance(target, Structured):
        raise ToolkitError(f"{spec.name} removes whole decoder layers: use --sparsity structured:N layers "
                           f"(e.g. structured:4 layers) or a fraction such as structured:25%, not {target}")
    spec.check(compression)
    layers = decoder_layers(model)
    count = check_count(target, len(layers))
    layer_list_parent(model, layers)
    config = text_config(model)
    if getattr(config, "num_hidden_layers", None) != len(layers):
        raise ToolkitError(f"{type(model).__name__}: the config's num_hidden_layers "
                           f"({getattr(config, 'num_hidden_layers', None)}) is not its {len(layers)} decoder "
                           "layers; depth pruning needs a config that counts them")
    return count


def text_config(model: nn.Module) -> Any:
    """The config that counts the decoder layers (a composite model's text config)."""
    config: Any = model.config  # a transformers PretrainedConfig
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def layer_list_parent(model: nn.Module, layers: nn.ModuleList) -> tuple[nn.Module, str]:
    """The module holding the decoder ModuleList and the attribute it is held under."""
    for name, module in model.named_modules():
        if module is layers and name:
            parent, _, attr = name.rpartition(".")
            return model.get_submodule(parent), attr
    raise ToolkitError(f"{type(model).__name__}: cannot find where its decoder layers are held")


@dataclass
class DepthScores:
    """Sums over the calibration tokens: cos per layer, ‖x_out − x_in‖² and ‖x_out‖², and angular per block start."""

    cos: Tensor
    diff: Tensor
    norm: Tensor
    angular: Tensor | None
    tokens: int = 0

    def influence(self) -> Tensor:
        """Block influence per layer."""
        return block_influence(self.cos, self.tokens)

    def identity_error(self) -> Tensor:
        """‖x_out − x_in‖/‖x_out‖ per layer."""
        return (self.diff / self.norm.clamp_min(1e-30)).sqrt()


def _cosines(a: Tensor, b: Tensor) -> Tensor:
    """Cosine of every token's pair of hidden states (..., D) → (...), in float32."""
    return torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1, eps=1e-12)


def score_layers(  # noqa: PLR0913 - the pass's inputs and its two sinks
    model: nn.Module, windows: Tensor, block: int, angular: bool, cfg: EngineConfig,
    emit: Callable[[Event], None], cancelled: Callable[[], bool],
) -> DepthScores:
    """One pass of the dense model over ``windows``, layer by layer (the module docstring's step 1)."""
    device = resolve_device(cfg.device)
    layers = decoder_layers(model)
    count = len(layers)
    zeros = torch.zeros(count, dtype=torch.float64)
    sums = DepthScores(zeros.clone(), zeros.clone(), zeros.clone(),
                       torch.zeros(count - block + 1, dtype=torch.float64) if angular else None)
    inputs: LayerInputs = capture_layer_inputs(model, layers, windows, device, cfg.batch_size)
    sums.tokens = sum(h.shape[:-1].numel() for h in inputs.hidden)
    history = [[h.cpu() for h in inputs.hidden]] if angular else []
    for index, layer in enumerate(layers):
        if cancelled():
            raise RunCancelled("cancelled")
        emit(LayerStarted(layer=index, num_layers=count, groups=[[name] for name in layer_linears(layer)]))
        home = next(layer.parameters()).device
        layer.to(device)
        try:
            outputs = [run_layer(layer, inputs, b) for b in range(len(inputs.hidden))]
        finally:
            layer.to(home)
        for x, y in zip(inputs.hidden, outputs, strict=True):
            sums.cos[index] += float(_cosines(x, y).double().sum())
            sums.diff[index] += float((y.float() - x.float()).pow(2).sum())
            sums.norm[index] += float(y.float().pow(2).sum())
        if sums.angular is not None:
            history.append([y.cpu() for y in outputs])
            if len(history) > block:  # boundaries l … l + n held: the block starting at l
                start = index + 1 - block
                sums.angular[start] = sum(float(torch.arccos(_cosines(a, b).clamp(-1.0, 1.0)).double().sum())
                                          for a, b in zip(history[0], history[-1], strict=True)) / torch.pi
                history.pop(0)
        inputs = inputs.next_layer(outputs)
    if sums.angular is not None:
        sums.angular /= max(sums.tokens, 1)
    return sums


def shorten_config(config: Any, kept: list[int], journal: WriteBack) -> dict[str, Any]:
    """Write the kept layers' count and per-layer attributes into ``config``; returns what changed.

    ``num_hidden_layers`` → len(kept); every list attribute with one entry per old layer
    (``layer_types``, ``no_rope_layers``, …) keeps the kept layers' entries; index lists
    (``mlp_only_layers``) are renumbered; boundaries such as Qwen2's ``max_window_layers`` become
    the number of kept layers below them.
    """
    old = int(config.num_hidden_layers)
    where = {layer: new for new, layer in enumerate(kept)}
    changes: dict[str, Any] = {"num_hidden_layers": len(kept)}
    for attr, value in vars(config).items():
        if attr.startswith("_"):
            continue
        if isinstance(value, list | tuple) and len(value) == old and attr not in INDEX_LISTS and "layer" in attr:
            changes[attr] = type(value)(value[i] for i in kept)
        elif attr in INDEX_LISTS and isinstance(value, list | tuple):
            changes[attr] = type(value)(where[i] for i in value if i in where)
        elif attr in THRESHOLDS and isinstance(value, int) and not isinstance(value, bool):
            changes[attr] = sum(1 for i in kept if i < value)
    for attr, value in changes.items():
        journal.set_attr(config, attr, value)
    return changes


def remove_layers(model: nn.Module, removed: list[int], journal: WriteBack) -> dict[str, Any]:
    """Drop the ``removed`` decoder layers of ``model`` in place (step 3); returns the config changes."""
    layers = decoder_layers(model)
    parent, attr = layer_list_parent(model, layers)
    gone = set(removed)
    kept = [i for i in range(len(layers)) if i not in gone]
    journal.replace(parent, attr, nn.ModuleList([layers[i] for i in kept]))
    for new, old in enumerate(kept):
        for module in layers[old].modules():
            if isinstance(getattr(module, "layer_idx", None), int) and module.layer_idx != new:
                journal.set_attr(module, "layer_idx", new)
    return shorten_config(text_config(model), kept, journal)


def _linear_params(layer: nn.Module) -> dict[str, int]:
    return {name: get_weight(m).numel() for name, m in layer_linears(layer).items()}


def _report(emit: Callable[[Event], None], layers: list[nn.Module], removed: list[int], errors: Tensor,
            measured: bool) -> None:
    """``SublayerPruned`` per linear and ``LayerDone`` per layer (the module docstring's events).

    Unless ``measured`` (``--error none``) LayerDone's error is None; the scores' identity errors stay in DepthScored.
    """
    for index, layer in enumerate(layers):
        gone = index in removed
        for name, module in layer_linears(layer).items():
            rows, cols = get_weight(module).shape
            emit(SublayerPruned(layer=index, name=name, shape=[int(rows), int(cols)], sparsity=float(gone),
                                rel_error=float(gone), rel_error_dense=float("nan"), damping=float("nan"),
                                seconds=0.0, info={"unit": "layers", "removed": gone},
                                params_before=int(rows * cols), params_after=0 if gone else int(rows * cols)))
        error = (float(errors[index]) if gone else 0.0) if measured else None
        emit(LayerDone(layer=index, num_layers=len(layers), output_rel_error=error, seconds=0.0))


def prune_depth(  # noqa: PLR0913 - keyword-only sinks, as prune_blocks
    model: nn.Module, windows: Tensor, spec: MethodSpec, compression: Compression, method_cfg: Any, *,
    cfg: EngineConfig, emit: Callable[[Event], None], cancelled: Callable[[], bool] = lambda: False,
    writeback: WriteBack, on_structure: Callable[[dict], None] = lambda structure: None,
) -> BlockResult:
    """Remove whole decoder layers of ``model`` in place (see the module docstring).

    ``compression.sparsity`` is ``structured:N layers`` or a fraction of the layers; ``method_cfg``
    a :class:`toolkit.methods.block.depth.DepthConfig`. Of ``cfg`` it uses ``device``,
    ``batch_size`` and ``restore_on_failure``. Raises :class:`ToolkitError` on bad input and
    :class:`RunCancelled` on a cancel; either way the model is restored (with ``restore_on_failure``).
    """
    count = check_depth(model, spec, compression)
    layers = list(decoder_layers(model))
    sizes = [_linear_params(layer) for layer in layers]
    result = BlockResult(params_before=sum(sum(s.values()) for s in sizes),
                         model_params_before=sum(p.numel() for p in model.parameters()))
    journal = WriteBack(enabled=True)
    start = time.perf_counter()
    try:
        with torch.no_grad():
            sums = score_layers(model, windows, count, method_cfg.score == "angular", cfg, emit, cancelled)
        influence = sums.influence()
        removed = choose_layers(method_cfg.score, influence, sums.angular, count)
        errors = sums.identity_error()
        emit(DepthScored(score=method_cfg.score, num_layers=len(layers), block=count,
                         influence=[float(v) for v in influence],
                         angular=[] if sums.angular is None else [float(v) for v in sums.angular],
                         identity_error=[float(v) for v in errors], removed=removed, tokens=sums.tokens,
                         seconds=time.perf_counter() - start))
        if cancelled():
            raise RunCancelled("cancelled")
        changes = remove_layers(model, removed, journal)
    except BaseException:
        if cfg.restore_on_failure:
            journal.restore()
        writeback.absorb(journal)
        raise
    writeback.absorb(journal)
    _report(emit, layers, removed, errors, cfg.error != "none")
    result.params_after = result.params_before - sum(sum(sizes[i].values()) for i in removed)
    result.model_params_after = sum(p.numel() for p in model.parameters())
    result.total, result.zeros = result.params_before, result.params_before - result.params_after
    result.layers = [{"layer": i, "removed": i in removed, "influence": float(influence[i]),
                      "identity_error": float(errors[i])} for i in range(len(layers))]
    result.structure = {
        "format": "prunelab-structure/1", "method": spec.name, "model_type": str(text_config(model).model_type),
        "unit": Unit.LAYERS.value, "score": method_cfg.score, "num_layers_before": len(layers),
        "num_layers_after": len(layers) - len(removed), "removed_layers": removed,
        "kept_layers": [i for i in range(len(layers)) if i not in removed], "config": changes,
        "params_before": result.params_before, "params_after": result.params_after, "layers": result.layers,
    }
    result.seconds = time.perf_counter() - start
    on_structure(result.structure)
    return result
