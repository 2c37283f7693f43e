"""The sequential layer-by-layer pruning driver (DESIGN.md "The flow of one run").

For each decoder layer i (only layer i on the device):

1. groups of linears that share an input are discovered by one probe forward (call order);
2. statistics of each group are gathered by hooks — ``sequential="layer"``: every group in one
   pass over the unpruned layer; ``sequential="group"``: group g after groups < g were pruned
   (each pass stops as soon as the group's input is captured). When the method needs the
   cross-Gram, a dense copy of the layer is run on the same inputs to give the dense-path x;
3. the method solves each linear; the engine writes the weight back and measures
   rel_error = ‖(W* − W)X*‖/‖WX*‖ = sqrt(tr(ΔW G* ΔWᵀ)/tr(W G* Wᵀ)) and, with the cross
   statistics, rel_error_dense = ‖W*X* − WX‖/‖WX‖ from tr(W*G*W*ᵀ) − 2tr(W*CWᵀ) + tr(WGWᵀ);
4. the pruned layer runs on its inputs; ``LayerDone`` carries ‖Y* − Y‖/‖Y‖ against the dense
   layer on the same inputs; layer i+1 sees the pruned (``propagate="pruned"``) or the dense
   (``"dense"``) outputs.

Every step emits a typed event; every linear is a cancellation point. On any failure the
original weights are restored (``restore_on_failure``), so a failed run never leaves a half-pruned
model behind.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from toolkit.capture import LayerInputs, capture_layer_inputs, run_layer
from toolkit.errors import NumericalError, RunCancelled, ToolkitError
from toolkit.events import Event, LayerDone, LayerStarted, RunWarning, SublayerPruned
from toolkit.memory import keep_freed_memory
from toolkit.methods.base import SOLVER_DTYPE, LinearStats, MethodSpec, SolveContext, Stat
from toolkit.models import decoder_layers, get_weight, layer_linears, set_weight_
from toolkit.engine_options import DEVICES_AUTO, FUSED, PROPAGATE, SEQUENTIAL
from toolkit.parallel import prune_in_parallel, resolve_devices
from toolkit.sparsity import Target, validate_for_shape
from toolkit.stats import GroupStats, StopForward, capture_inputs, discover_groups


@dataclass(frozen=True)
class EngineConfig:
    """How the engine drives a run (the method's own options live in its config)."""

    propagate: str | None = None  # "pruned" | "dense" (layer i+1's inputs); None = the method's default
    sequential: str | None = None  # "group" | "layer"; None = the method's reference setting
    batch_size: int = 8  # calibration windows per forward pass (the multi-pass path)
    device: str = "auto"  # "auto" = cuda when available, else cpu
    restore_on_failure: bool = True
    fused: str = "auto"  # "auto" | "on" | "off": sequential=group in ONE pass per layer (see _fused_pass)
    fused_budget_mb: int = 4096  # "auto" fuses when the layer's activations for all windows fit in this
    error_windows: int = 4  # windows behind the layer output error (all when a dense pass runs anyway)
    # and behind the Gram of methods that need only column norms (Wanda): their rel_error is a sample
    devices: str = DEVICES_AUTO  # layers pruned concurrently on these (needs propagate=dense); see parallel.py

    def __post_init__(self) -> None:
        if self.propagate is not None and self.propagate not in PROPAGATE:
            raise ToolkitError(f"propagate must be one of {PROPAGATE}, got {self.propagate!r}")
        if self.sequential is not None and self.sequential not in SEQUENTIAL:
            raise ToolkitError(f"sequential must be one of {SEQUENTIAL}, got {self.sequential!r}")
        if self.batch_size < 1:
            raise ToolkitError("batch_size must be ≥ 1")
        if self.fused not in FUSED:
            raise ToolkitError(f"fused must be one of {FUSED}, got {self.fused!r}")
        if self.error_windows < 1 or self.fused_budget_mb < 0:
            raise ToolkitError("error_windows must be ≥ 1 and fused_budget_mb ≥ 0")


def resolve_device(name: str) -> torch.device:
    """``auto`` → cuda when available, else cpu; otherwise the named device (checked)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ToolkitError("--device cuda was asked for but no CUDA device is available; use --device cpu")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ToolkitError(f"unknown device {name!r}; use auto, cpu or cuda") from None


@dataclass
class EngineResult:
    """What the engine measured: per-linear records, achieved sparsity, pruning seconds."""

    layers: list[dict] = field(default_factory=list)
    zeros: int = 0
    total: int = 0
    seconds: float = 0.0

    @property
    def achieved_sparsity(self) -> float:
        """Fraction of zeros over all pruned linears."""
        return self.zeros / self.total if self.total else 0.0


MaskSink = Callable[[int, str, Tensor], None]


@dataclass
class _Run:
    """The state shared by the steps of one engine run."""

    spec: MethodSpec
    target: Target
    method_cfg: object
    cfg: EngineConfig
    device: torch.device
    emit: Callable[[Event], None]
    cancelled: Callable[[], bool]
    on_mask: MaskSink
    result: EngineResult = field(default_factory=EngineResult)
    layer: int = 0  # the decoder layer being pruned
    backup: list[tuple[nn.Module, Tensor]] = field(default_factory=list)
    fused: bool = False  # one pass per layer over all windows as a single batch
    gram_limit: int | None = None  # tokens behind G* for methods that need only column norms

    @property
    def sequential(self) -> str:
        return self.cfg.sequential or self.spec.sequential

    @property
    def propagate(self) -> str:
        return self.cfg.propagate or self.spec.propagate

    @property
    def needs_cross(self) -> bool:
        return Stat.CROSS in self.spec.needs or Stat.DENSE_GRAM in self.spec.needs


def check_targets(model: nn.Module, spec: MethodSpec, target: Target) -> list[str]:
    """Validate the target against every prunable linear before anything changes.

    Returns the qualified names of the linears of layer 0 (for RunStarted).
    """
    if not spec.supports(target):
        raise ToolkitError(f"{spec.name} does not support {target}; see `python -m toolkit methods`")
    layers = decoder_layers(model)
    for index, layer in enumerate(layers):
        for name, module in layer_linears(layer).items():
            try:
                validate_for_shape(target, tuple(get_weight(module).shape))
            except ToolkitError as exc:
                raise ToolkitError(f"layer {index} {name}: {exc}") from None
    return list(layer_linears(layers[0]))


def prune_layers(
    model: nn.Module,
    windows: Tensor,
    spec: MethodSpec,
    target: Target,
    method_cfg: object,
    *,
    cfg: EngineConfig,
    emit: Callable[[Event], None],
    cancelled: Callable[[], bool] = lambda: False,
    on_mask: MaskSink = lambda layer, name, keep: None,
) -> EngineResult:
    """Prune every decoder layer of ``model`` in place on calibration ``windows`` (num, seq).

    Raises :class:`RunCancelled` when ``cancelled()`` turns true, :class:`ToolkitError` /
    :class:`NumericalError` on bad input; on any exception the original weights are restored
    when ``cfg.restore_on_failure``.
    """
    keep_freed_memory()
    run = _Run(spec, target, method_cfg, cfg, resolve_device(cfg.device), emit, cancelled, on_mask)
    layers = decoder_layers(model)
    run.fused = use_fused(run, model, layers[0], windows)
    if not ({Stat.GRAM, Stat.CROSS, Stat.DENSE_GRAM} & spec.needs):
        run.gram_limit = min(cfg.error_windows, windows.shape[0]) * windows.shape[1]
    devices = resolve_devices(cfg.devices, run.device, run.propagate, resolve_device)
    start = time.perf_counter()
    try:
        with torch.no_grad():
            batch = windows.shape[0] if run.fused else cfg.batch_size
            inputs = capture_layer_inputs(model, layers, windows, run.device, batch)
            if len(devices) > 1:
                prune_in_parallel(run, layers, inputs, devices,
                                  lambda worker, index, layer, x: _prune_layer(worker, index, len(layers), layer, x, None),
                                  lambda layer, x: _dense_next(run, layer, x))
            else:
                _prune_in_order(run, layers, inputs)
    except BaseException:
        if cfg.restore_on_failure:
            for module, weight in reversed(run.backup):
                set_weight_(module, weight)
        raise
    run.result.seconds = time.perf_counter() - start
    return run.result


def _prune_in_order(run: _Run, layers: nn.ModuleList, inputs: LayerInputs) -> None:
    """Layer after layer on one device, each seeing the previous one's pruned or dense outputs."""
    groups: list[list[str]] | None = None
    for index, layer in enumerate(layers):
        home = next(layer.parameters()).device
        layer.to(run.device)
        try:
            groups, inputs = _prune_layer(run, index, len(layers), layer, inputs, groups)
        finally:
            layer.to(home)


def _dense_next(run: _Run, layer: nn.Module, inputs: LayerInputs) -> LayerInputs:
    """The dense layer's outputs on the main device: the next layer's inputs under propagate=dense."""
    home = next(layer.parameters()).device
    layer.to(run.device)
    try:
        return inputs.next_layer([run_layer(layer, inputs, b) for b in range(len(inputs.hidden))])
    finally:
        layer.to(home)


def use_fused(run: _Run, model: nn.Module, layer: nn.Module, windows: Tensor) -> bool:
    """Whether ``sequential=group`` runs as one pass per layer over all windows at once.

    The fused pass keeps every window's activations of one layer in memory at the same time;
    estimate: tokens × 4 bytes × (6 × widest linear + the widths of the dense-path inputs kept for
    cross statistics), plus the (windows, heads, seq, seq) scores of eager attention.
    """
    if run.cfg.fused == "off" or run.sequential != "group":
        if run.cfg.fused == "on":
            raise ToolkitError("fused=on needs sequential=group (fused is one pass of the group-wise order)")
        return False
    if run.cfg.fused == "on":
        return True
    num, seq = windows.shape
    linears = layer_linears(layer)
    widest = max((max(get_weight(m).shape) for m in linears.values()), default=0)
    per_token = 6 * widest + (sum(get_weight(m).shape[1] for m in linears.values()) if run.needs_cross else 0)
    estimate = num * seq * 4 * per_token
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", "eager") == "eager":
        estimate += num * getattr(config, "num_attention_heads", 1) * seq * seq * 4
    return estimate <= run.cfg.fused_budget_mb * 2**20


def _prune_layer(
    run: _Run, index: int, num_layers: int, layer: nn.Module, inputs: LayerInputs, groups: list[list[str]] | None
) -> tuple[list[list[str]], LayerInputs]:
    t0 = time.perf_counter()
    run.layer = index
    assert inputs.layer == index, f"layer {index} was given the inputs of layer {inputs.layer}"
    linears = layer_linears(layer)
    if groups is None or {n for g in groups for n in g} - set(linears):
        probe = inputs.head(1) if run.fused else inputs  # one window is enough to see who shares an input
        groups = discover_groups(layer, linears, lambda: run_layer(layer, probe, 0))
        missing = set(linears) - {n for g in groups for n in g}
        if missing:
            run.emit(RunWarning(message=f"never called in a forward pass, left dense: {sorted(missing)}", layer=index))
    run.emit(LayerStarted(layer=index, num_layers=num_layers, groups=[list(g) for g in groups]))
    if run.fused:
        pruned, dense = _fused_pass(run, index, layer, linears, inputs, groups)
        _layer_done(run, index, num_layers, _output_error([pruned], [dense]), t0)
        return groups, inputs.next_layer([pruned if run.propagate == "pruned" else dense])
    dense_copy = copy.deepcopy(layer) if run.needs_cross and run.sequential == "group" else None
    dense_out: list[Tensor] = []
    if run.sequential == "layer":
        all_stats = _gather(run, layer, inputs, groups, dense_out=dense_out)
        for group, stats in zip(groups, all_stats, strict=True):
            _prune_group(run, index, layer, linears, group, stats)
    else:
        for g, group in enumerate(groups):
            (stats,) = _gather(run, layer, inputs, [group], dense_out=dense_out if g == 0 else None,
                               dense_layer=dense_copy if g > 0 else None)
            _prune_group(run, index, layer, linears, group, stats)
    pruned_out = [run_layer(layer, inputs, b) for b in range(len(inputs.hidden))]
    _layer_done(run, index, num_layers, _output_error(pruned_out, dense_out), t0)
    nxt = pruned_out if run.propagate == "pruned" else dense_out
    return groups, inputs.next_layer(nxt)


def _output_error(pruned: list[Tensor], dense: list[Tensor]) -> float:
    """‖Y* − Y‖_F / ‖Y‖_F over the windows both lists hold (``pruned`` may hold more)."""
    num = sum(float((p[: d.shape[0]] - d).float().pow(2).sum()) for p, d in zip(pruned, dense, strict=True))
    den = sum(float(d.float().pow(2).sum()) for d in dense)
    return math.sqrt(num / den) if den > 0 else 0.0


def _layer_done(run: _Run, index: int, num_layers: int, error: float, t0: float) -> None:
    if not math.isfinite(error):
        raise NumericalError(f"layer {index}: the pruned layer's outputs are not finite")
    run.emit(LayerDone(layer=index, num_layers=num_layers, output_rel_error=error, seconds=time.perf_counter() - t0))


def _fused_pass(
    run: _Run, index: int, layer: nn.Module, linears: dict[str, nn.Module], inputs: LayerInputs,
    groups: list[list[str]],
) -> tuple[Tensor, Tensor]:
    """``sequential=group`` in one forward pass of the whole calibration batch.

    A pre-hook on each group's first linear sees X* (every window at once, the earlier groups
    already pruned), builds the group's statistics, solves and writes back the group's weights,
    and lets the forward go on with them: the pass's output is the pruned layer's output Y*.
    The dense layer runs first only where it is needed: on every window for the cross statistics
    (its group inputs are kept) or for ``propagate=dense``; otherwise on the first
    ``error_windows`` windows, for the layer output error.

    Returns (Y* for all windows, the dense Y for all windows or the first few).
    """
    heads = {group[0]: group for group in groups}
    full_dense = run.needs_cross or run.propagate == "dense"
    dense_inputs: dict[str, Tensor] = {}
    reference_inputs = inputs if full_dense else inputs.head(run.cfg.error_windows)
    watched = {name: linears[name] for name in heads} if run.needs_cross else {}
    with capture_inputs(watched, dense_inputs.__setitem__):
        dense = run_layer(layer, reference_inputs, 0)
    pending = set(heads)

    def hook(name: str) -> Callable:
        def prune_before_use(module: nn.Module, args: tuple) -> None:
            if name not in pending:
                raise ToolkitError(f"layer {index} {name} runs twice in one forward pass; use --fused off")
            pending.discard(name)
            run_cancel_check(run)
            acc = GroupStats(get_weight(module).shape[1], run.device, run.needs_cross, run.gram_limit)
            acc.add(args[0].detach(), dense_inputs.get(name))
            _prune_group(run, index, layer, linears, heads[name], acc.finish(f"layer {index} {name}"))

        return prune_before_use

    handles = [linears[name].register_forward_pre_hook(hook(name)) for name in heads]
    try:
        pruned = run_layer(layer, inputs, 0)
    finally:
        for handle in handles:
            handle.remove()
    dense_inputs.clear()
    if pending:
        raise ToolkitError(f"layer {index}: {sorted(pending)} never ran in the pruned pass; use --fused off")
    return pruned, dense


def _gather(
    run: _Run,
    layer: nn.Module,
    inputs: LayerInputs,
    groups: list[list[str]],
    dense_out: list[Tensor] | None = None,
    dense_layer: nn.Module | None = None,
) -> list[LinearStats]:
    """One pass of ``layer`` over all batches accumulating the statistics of ``groups``.

    With ``dense_out`` the pass runs to the end and keeps the layer's outputs; otherwise it stops
    once the groups' inputs were seen. ``dense_layer`` (the unpruned copy) supplies the
    dense-path inputs for the cross statistics.
    """
    linears = layer_linears(layer)
    heads = {group[0]: linears[group[0]] for group in groups}
    acc = {name: GroupStats(get_weight(m).shape[1], run.device, run.needs_cross, run.gram_limit)
           for name, m in heads.items()}
    stop = None if dense_out is not None else set(heads)
    dense_modules = dict(dense_layer.named_modules()) if dense_layer is not None else {}
    dense_heads = {name: dense_modules[name] for name in heads} if dense_layer is not None else {}
    for b in range(len(inputs.hidden)):
        run_cancel_check(run)
        seen: dict[str, Tensor] = {}
        with capture_inputs(heads, seen.__setitem__, stop):
            try:
                out = run_layer(layer, inputs, b)
                if dense_out is not None:
                    dense_out.append(out)
            except StopForward:
                pass
        dense_seen: dict[str, Tensor] = {}
        if dense_layer is not None:
            with capture_inputs(dense_heads, dense_seen.__setitem__, set(heads)):
                try:
                    run_layer(dense_layer, inputs, b)
                except StopForward:
                    pass
        for name, stats in acc.items():
            stats.add(seen[name], dense_seen.get(name, seen[name]) if run.needs_cross else None)
    return [acc[group[0]].finish(f"layer {run.layer} {group[0]}") for group in groups]


def run_cancel_check(run: _Run) -> None:
    """A cancellation point."""
    if run.cancelled():
        raise RunCancelled("cancelled")


def _prune_group(
    run: _Run, index: int, layer: nn.Module, linears: dict[str, nn.Module], group: list[str], stats: LinearStats
) -> None:
    for name in group:
        run_cancel_check(run)
        module = linears[name]
        W = get_weight(module).to(SOLVER_DTYPE).clone()  # (out, in)
        if not torch.isfinite(W).all():
            raise NumericalError(f"layer {index} {name}: the weight has NaN/Inf entries; the checkpoint is broken")
        ctx = SolveContext(layer=index, name=name, emit=run.emit, cancelled=run.cancelled)
        t0 = time.perf_counter()
        result = run.spec.fn(W.clone(), stats, run.target, run.method_cfg, ctx)
        seconds = time.perf_counter() - t0
        new = result.weight.to(SOLVER_DTYPE)
        assert new.shape == W.shape, f"{run.spec.name} returned shape {tuple(new.shape)} for {tuple(W.shape)}"
        if not torch.isfinite(new).all():
            raise NumericalError(f"layer {index} {name}: {run.spec.name} produced NaN/Inf weights")
        if run.cfg.restore_on_failure:
            run.backup.append((module, get_weight(module).detach().to("cpu", copy=True)))
        set_weight_(module, new)
        written = get_weight(module)
        zeros = int((written == 0).sum())
        run.result.zeros += zeros
        run.result.total += written.numel()
        rel, rel_dense = reconstruction_errors(W, new, stats)
        event = SublayerPruned(
            layer=index, name=name, shape=list(W.shape), sparsity=zeros / written.numel(),
            rel_error=rel, rel_error_dense=rel_dense, damping=result.damping, seconds=seconds,
            info=dict(result.info),
        )
        run.result.layers.append(event.to_dict())
        run.on_mask(index, name, result.keep_mask.to("cpu", torch.bool))
        run.emit(event)


def reconstruction_errors(W: Tensor, W_new: Tensor, stats: LinearStats) -> tuple[float, float]:
    """(‖ΔW X*‖/‖W X*‖, ‖W*X* − WX‖/‖WX‖) from the Gram matrices (nan without cross stats)."""
    G = stats.gram
    dW = W_new - W
    base = float(((W @ G) * W).sum())
    rel = math.sqrt(max(float(((dW @ G) * dW).sum()), 0.0) / base) if base > 0 else 0.0
    if stats.cross is None or stats.dense_gram is None:
        return rel, math.nan
    dense = float(((W @ stats.dense_gram) * W).sum())
    sq = float(((W_new @ G) * W_new).sum()) - 2 * float(((W_new @ stats.cross) * W).sum()) + dense
    rel_dense = math.sqrt(max(sq, 0.0) / dense) if dense > 0 else 0.0
    return rel, rel_dense
