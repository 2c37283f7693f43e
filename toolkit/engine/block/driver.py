"""The block-scope engine: heads and channels scored, ranked globally, compensated and removed.

``prune_blocks`` is what :func:`toolkit.engine.prune.prune_layers` calls for a method with
``scope=Scope.BLOCK`` (numerical, flap, wanda-sp, magnitude-sp; ``depth``, which removes whole
layers, goes to :func:`toolkit.engine.block.depth.prune_depth`). Numerical Pruning's pipeline
(notes §2):

1. **Score pass** (dense model, layer by layer, dense activations propagate): the inputs of
   o_proj and down_proj give G = Σxxᵀ/N and μ (:mod:`toolkit.engine.block.capture`); the method scores
   every head unit and MLP channel; ``LayerScored`` per layer.
2. **Plan**: one ranking of all units of all layers (:func:`toolkit.engine.block.plan.allocate`); ``GlobalRanking``.
3. **Apply pass**, layer by layer: o_proj / down_proj compensated for their removed inputs
   (:func:`toolkit.methods.block.compensation.compensate`) on the stored dense statistics
   (``grams=dense``, notes option A) or on statistics re-gathered on the already pruned layers
   (``grams=sequential``, option B); then q/k/v rows and o columns of removed heads and gate/up
   rows and down columns of removed channels go (:mod:`toolkit.engine.block.shrink`). Events: ``LayerStarted``,
   ``SublayerPruned`` per replaced Linear, ``UnitsRemoved`` per kind, ``LayerDone`` with
   ‖Y* − Y‖/‖Y‖ of the layer against its dense self (on ``cfg.error_windows`` windows under
   ``grams=dense``, on all under ``sequential``; None with ``cfg.error="none"``, when under
   ``grams=dense`` the windows kept for it are neither captured nor run).

Every change goes through a WriteBack journal: on success it is handed to the caller's
``writeback``; on a failure or a cancel it is undone (``cfg.restore_on_failure``), so the model is
back at its original modules and shapes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from toolkit.engine.block.capture import gather_block_stats
from toolkit.engine.block.depth import check_depth, is_depth, prune_depth
from toolkit.engine.block.plan import Allocation, LayerCandidates, LayerOffer, allocate, check_budget
from toolkit.engine.block.report import (
    LayerOutcome,
    global_ranking_event,
    layer_events,
    layer_record,
    layer_scored_event,
)
from toolkit.engine.block.result import BlockResult
from toolkit.engine.block.shrink import LayerEdit, set_uniform_config, shrink_channels, shrink_heads
from toolkit.engine.capture import LayerInputs, capture_layer_inputs, run_layer
from toolkit.engine.state import EngineConfig
from toolkit.engine.writeback import WriteBack
from toolkit.errors import NumericalError, RunCancelled, ToolkitError
from toolkit.events import Event, LayerDone, LayerStarted, RunWarning, SublayerPruned
from toolkit.methods.base import MethodSpec, SolveContext
from toolkit.methods.block.base import BlockStats, BlockTensors, HeadLayout
from toolkit.methods.block.compensation import compensate, output_error
from toolkit.models.layers import decoder_layers
from toolkit.models.structure import (
    ATTN_ROLES,
    MLP_ROLES,
    BlockView,
    block_views,
    check_unit,
    family_of,
    head_units,
    unit_costs,
)
from toolkit.runtime.devices import resolve_device
from toolkit.spec.compression import Compression, Unit
from toolkit.spec.targets import Structured


@dataclass
class _BlockRun:
    """State shared by the steps of one block run."""

    spec: MethodSpec
    method_cfg: Any
    cfg: EngineConfig
    device: torch.device
    unit: Unit
    ratio: float
    emit: Callable[[Event], None]
    cancelled: Callable[[], bool]
    journal: WriteBack
    result: BlockResult = field(default_factory=BlockResult)
    stats: list[BlockStats] = field(default_factory=list)
    layouts: list[HeadLayout] = field(default_factory=list)

    def check_cancel(self) -> None:
        """A cancellation point."""
        if self.cancelled():
            raise RunCancelled("cancelled")


def prune_blocks(  # noqa: PLR0913 - keyword-only sinks, as prune_layers
    model: nn.Module, windows: Tensor, spec: MethodSpec, compression: Compression, method_cfg: Any, *,
    cfg: EngineConfig, emit: Callable[[Event], None], cancelled: Callable[[], bool] = lambda: False,
    writeback: WriteBack, on_structure: Callable[[dict], None] = lambda structure: None,
) -> BlockResult:
    """Remove heads and/or channels of every decoder layer of ``model`` in place (see the module docstring).

    ``windows`` (num, seq) are the calibration tokens; ``compression.sparsity`` must be
    :class:`Structured` (ρ = fraction of the candidate units' parameters to remove) and
    ``compression.unit`` picks heads, channels or both (None: both). ``on_structure`` receives the
    JSON-able per-layer structure once every layer is done. Of ``cfg`` it uses ``device``,
    ``batch_size``, ``error_windows`` and ``restore_on_failure`` (scoring always propagates dense
    activations; the method's ``grams`` option plays the role of ``propagate`` for compensation).
    Raises :class:`ToolkitError` on bad input (unknown family, missing unit, a ratio that would
    empty a layer), :class:`RunCancelled` on a cancel; either way the model is restored.
    """
    if is_depth(spec, compression):  # whole decoder layers: toolkit.engine.block.depth
        return prune_depth(model, windows, spec, compression, method_cfg, cfg=cfg, emit=emit, cancelled=cancelled,
                           writeback=writeback, on_structure=on_structure)
    run = _start(model, spec, compression, method_cfg, cfg, (emit, cancelled))
    run.device = resolve_device(cfg.device)
    layers = decoder_layers(model)
    views = block_views(model, layers)
    run.result.params_before = sum(v.params() for v in views)
    run.result.model_params_before = sum(p.numel() for p in model.parameters())
    start = time.perf_counter()
    try:
        with torch.no_grad():
            inputs = capture_layer_inputs(model, layers, windows, run.device, cfg.batch_size)
            check = inputs if method_cfg.grams == "sequential" else None if cfg.error == "none" else \
                capture_layer_inputs(model, layers, windows[: cfg.error_windows], run.device, cfg.batch_size)
            candidates = []
            for i in range(len(views)):
                candidate, inputs = _score_layer(run, i, views, inputs)
                candidates.append(candidate)
            del inputs
            allocation = allocate(candidates, run.ratio, run.unit, method_cfg)
            run.emit(global_ranking_event(spec.name, method_cfg.allocation, run.ratio, allocation, candidates))
            records = []
            for i in range(len(views)):
                record, check = _apply_layer(run, i, views, allocation, check)
                records.append(record)
            _check_budget(run, views, allocation)
            problem = set_uniform_config(model, views, method_cfg.remove, run.journal)
            if problem and method_cfg.uniform:
                run.emit(RunWarning(message=f"uniform counts not written into the config: {problem}"))
    except BaseException:
        if cfg.restore_on_failure:
            run.journal.restore()
        writeback.absorb(run.journal)
        raise
    writeback.absorb(run.journal)
    _finish(run, model, views, records, allocation)
    run.result.seconds = time.perf_counter() - start
    on_structure(run.result.structure)
    return run.result


def _start(model: nn.Module, spec: MethodSpec, compression: Compression, method_cfg: Any, cfg: EngineConfig,
           hooks: tuple[Callable[[Event], None], Callable[[], bool]]) -> _BlockRun:
    """Validate the request before anything runs."""
    check_block_budget(model, spec, compression, method_cfg)
    assert isinstance(compression.sparsity, Structured)  # check_block_budget refused any other target
    unit = compression.unit or Unit.HEADS_CHANNELS
    emit, cancelled = hooks
    return _BlockRun(spec, method_cfg, cfg, torch.device("cpu"), unit, compression.sparsity.fraction, emit,
                     cancelled, WriteBack(enabled=True))


def check_block_budget(model: nn.Module, spec: MethodSpec, compression: Compression, method_cfg: Any) -> None:
    """The structural checks of a block-scope run that need no statistics (one ``error:`` line before any work).

    Family and unit known, and a ratio that leaves every layer its minimum heads and channels.
    """
    if is_depth(spec, compression):
        check_depth(model, spec, compression)
        return
    if not isinstance(compression.sparsity, Structured):
        raise ToolkitError(f"{spec.name} removes heads and channels: use --sparsity structured:30%, "
                           f"not {compression.sparsity}")
    if compression.sparsity.layers:
        raise ToolkitError(f"{spec.name} removes heads and channels, {compression.sparsity} counts whole layers: "
                           "use --method depth, or a ratio such as structured:30%")
    unit = compression.unit or Unit.HEADS_CHANNELS
    spec.check(compression)
    check_unit(family_of(model), unit, getattr(model.config, "model_type", type(model).__name__))
    views = block_views(model, decoder_layers(model))
    offers = []
    for view in views:
        head_cost, channel_cost = unit_costs(view, method_cfg.gqa)
        channels = view.linear("down").in_features if view.has("down") else 0
        offers.append(LayerOffer(int(head_units(view, method_cfg.gqa).max()) + 1, head_cost, channels, channel_cost))
    check_budget(offers, compression.sparsity.fraction, unit, method_cfg)


def _tensors(view: BlockView, device: torch.device) -> BlockTensors:
    """Float32 copies of the structural weights (out, in) and biases of one layer."""
    weights: dict[str, Tensor] = {}
    biases: dict[str, Tensor | None] = {}
    for role in view.roles():
        lin = view.linear(role)
        weights[role] = lin.weight.detach().to(device, torch.float32)
        biases[role] = None if lin.bias is None else lin.bias.detach().to(device, torch.float32)
    return BlockTensors(weights, biases)


def _on_device(layer: nn.Module, device: torch.device) -> torch.device:
    home = next(layer.parameters()).device
    layer.to(device)
    return home


def _score_layer(
    run: _BlockRun, index: int, views: list[BlockView], inputs: LayerInputs
) -> tuple[LayerCandidates, LayerInputs]:
    """Pass 1 for one layer: statistics, scores, costs, and the dense outputs as the next inputs."""
    run.check_cancel()
    t0 = time.perf_counter()
    view, cfg = views[index], run.method_cfg
    home = _on_device(view.layer, run.device)
    try:
        stats, outputs = gather_block_stats(view, inputs, run.unit.removes_heads, run.unit.removes_channels,
                                            run.cancelled)
        units = head_units(view, cfg.gqa)
        layout = HeadLayout(units, view.head_dim, view.n_rep, int(units.max()) + 1,
                            owns_kv=cfg.gqa == "groups" or view.n_rep == 1)
        ctx = SolveContext(layer=index, emit=run.emit, cancelled=run.cancelled)
        scores = run.spec.fn(_tensors(view, run.device), stats, layout, run.ratio, cfg, ctx)  # type: ignore[arg-type]
    finally:
        view.layer.to(home)
    run.layouts.append(layout)
    keep = cfg.grams == "dense"
    run.stats.append(BlockStats(*(s.to("cpu") if keep and s is not None else None for s in (stats.attn, stats.mlp))))
    head_cost, channel_cost = unit_costs(view, cfg.gqa)
    groups = None if layout.owns_kv else units // view.n_rep
    run.emit(layer_scored_event(index, len(views), scores, time.perf_counter() - t0))
    # dense activations propagate (the notes' default for scoring)
    return LayerCandidates(scores, head_cost, channel_cost, groups), inputs.next_layer(outputs)


def _edit(run: _BlockRun, index: int, view: BlockView, stats: BlockStats, allocation: Allocation) -> tuple:
    """Compensated o/down weights for the allocation of one layer, and their (error, plain error, damping)."""
    edit, errors = LayerEdit(), {}
    warn = SolveContext(layer=index, emit=run.emit).warn
    plan = ((allocation.keep_heads[index], "o", stats.attn), (allocation.keep_channels[index], "down", stats.mlp))
    for keep_units, role, input_stats in plan:
        if keep_units is None or bool(keep_units.all()):
            continue
        assert input_stats is not None
        layout = run.layouts[index]
        keep = keep_units[layout.unit_of_head].repeat_interleave(view.head_dim) if role == "o" else keep_units
        lin = view.linear(role)
        W = lin.weight.detach().to(run.device, torch.float32)
        keep = keep.to(run.device)
        new, bias_delta, damp = compensate(W, input_stats, keep, run.method_cfg.compensate,
                                           run.method_cfg.damp_frac, warn)
        bias = None
        if bias_delta is not None:
            bias = bias_delta if lin.bias is None else lin.bias.detach().to(run.device, torch.float32) + bias_delta
        errors[role] = (output_error(W, new, input_stats, bias_delta), output_error(W, W * keep, input_stats), damp)
        if role == "o":
            edit.keep_heads, edit.o_weight, edit.o_bias = keep_units[layout.unit_of_head], new, bias
        else:
            edit.keep_channels, edit.down_weight, edit.down_bias = keep_units, new, bias
    return edit, errors


def _apply_layer(
    run: _BlockRun, index: int, views: list[BlockView], allocation: Allocation, inputs: LayerInputs | None
) -> tuple[dict, LayerInputs | None]:
    """Pass 2 for one layer: compensate, remove, measure; returns its structure record and next inputs.

    ``inputs`` is None under ``grams=dense`` with ``error="none"``: nothing runs but the edit.
    """
    run.check_cancel()
    t0 = time.perf_counter()
    view = views[index]
    run.emit(LayerStarted(layer=index, num_layers=len(views), groups=_groups(view)))
    before = {kind: view.params(roles) for kind, roles in (("attn", ATTN_ROLES), ("mlp", _mlp_roles(view)))}
    shapes = {role: list(view.linear(role).weight.shape) for role in view.roles()}
    home = _on_device(view.layer, run.device)
    try:
        dense: list[Tensor] = []
        if run.method_cfg.grams == "sequential" and inputs is not None:
            stats, dense = gather_block_stats(view, inputs, run.unit.removes_heads, run.unit.removes_channels,
                                              run.cancelled)
        else:
            stats = BlockStats(*(s.to(run.device) if s is not None else None for s in
                                 (run.stats[index].attn, run.stats[index].mlp)))
            if inputs is not None:
                dense = [run_layer(view.layer, inputs, b) for b in range(len(inputs.hidden))]
        edit, errors = _edit(run, index, view, stats, allocation)
    finally:
        view.layer.to(home)
    record = _install(run, view, edit)
    pruned = _pruned_outputs(run, view, inputs)
    error = None if run.cfg.error == "none" or pruned is None else _output_error(pruned, dense)
    if error is not None and not math.isfinite(error):
        raise NumericalError(f"layer {index}: the pruned layer's outputs are not finite")
    outcome = LayerOutcome(index, view, shapes, before, errors, edit,
                           (run.unit.removes_heads, run.unit.removes_channels), time.perf_counter() - t0)
    for event in layer_events(outcome):
        if isinstance(event, SublayerPruned):
            run.result.layers.append(event.to_dict())
        run.emit(event)
    run.emit(LayerDone(layer=index, num_layers=len(views), output_rel_error=error, seconds=time.perf_counter() - t0))
    return layer_record(index, view, record), None if inputs is None or pruned is None else inputs.next_layer(pruned)


def _pruned_outputs(run: _BlockRun, view: BlockView, inputs: LayerInputs | None) -> list[Tensor] | None:
    """The pruned layer's outputs on ``inputs`` (None without inputs)."""
    if inputs is None:
        return None
    home = _on_device(view.layer, run.device)
    try:
        return [run_layer(view.layer, inputs, b) for b in range(len(inputs.hidden))]
    finally:
        view.layer.to(home)


def _check_budget(run: _BlockRun, views: list[BlockView], allocation: Allocation) -> None:
    """Warn when the removed parameters fall short of the plan by more than 2% of the candidates.

    With ``gqa=query`` a removed query head whose KV group keeps other heads can stay as a zero
    head: HF attention needs every KV head to serve the same number of query slots
    (:func:`toolkit.models.structure.slot_layout`), so uneven groups are padded and the plan's 2·D·Dh
    per query head is not all saved. ``gqa=groups`` (the default) removes exactly what it plans.
    """
    if not run.method_cfg.remove or not allocation.total_cost:
        return
    removed = run.result.params_before - sum(v.params() for v in views)
    short = (allocation.removed_cost - removed) / allocation.total_cost
    if short > 0.02:
        run.emit(RunWarning(message=(
            f"{removed / allocation.total_cost:.1%} of the candidate parameters were removed, not the planned "
            f"{allocation.achieved_ratio:.1%}: with gqa={run.method_cfg.gqa}, query heads removed from a KV group "
            "that keeps others stay as zero heads (each KV head must serve equally many query heads); "
            "use gqa=groups to remove whole KV groups and meet the budget")))


def _install(run: _BlockRun, view: BlockView, edit: LayerEdit) -> dict:
    record: dict = {}
    if edit.keep_heads is not None:
        record.update(shrink_heads(view, edit, run.journal, run.method_cfg.remove))
    if edit.keep_channels is not None:
        record.update(shrink_channels(view, edit, run.journal, run.method_cfg.remove))
    return record


def _mlp_roles(view: BlockView) -> tuple[str, ...]:
    return tuple(r for r in MLP_ROLES if view.has(r))


def _groups(view: BlockView) -> list[list[str]]:
    roles = (("q", "k", "v"), ("o",), ("gate", "up"), ("down",))
    return [[view.name(r) for r in group if view.has(r)] for group in roles if any(view.has(r) for r in group)]


def _output_error(pruned: list[Tensor], dense: list[Tensor]) -> float:
    """‖Y* − Y‖_F / ‖Y‖_F over the batches."""
    num = sum(float((p - d).float().pow(2).sum()) for p, d in zip(pruned, dense, strict=True))
    den = sum(float(d.float().pow(2).sum()) for d in dense)
    return math.sqrt(num / den) if den > 0 else 0.0


def _finish(run: _BlockRun, model: nn.Module, views: list[BlockView], records: list[dict],
            allocation: Allocation) -> None:
    result = run.result
    result.params_after = sum(v.params() for v in views)
    result.model_params_after = sum(p.numel() for p in model.parameters())
    result.total = result.params_before
    result.zeros = result.params_before - result.params_after
    cfg = run.method_cfg
    result.structure = {
        "format": "prunelab-structure/1", "method": run.spec.name, "model_type": _model_type(model),
        "unit": run.unit.value, "ratio": run.ratio, "achieved_ratio": allocation.achieved_ratio,
        "allocation": cfg.allocation, "gqa": cfg.gqa, "removed": cfg.remove, "compensate": cfg.compensate,
        "grams": cfg.grams, "head_dim": views[0].head_dim, "params_before": result.params_before,
        "params_after": result.params_after, "layers": records,
    }


def _model_type(model: nn.Module) -> str:
    """The transformers ``config.model_type`` of ``model``."""
    config: Any = model.config  # a transformers PretrainedConfig
    return str(config.model_type)
