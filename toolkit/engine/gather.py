"""The statistics passes of one decoder layer (docs/architecture.md: statistics live in the engine).

- :func:`gather_stats`: one pass of the layer over every batch of calibration inputs, hooks
  accumulating the statistics of some groups of linears (the multi-pass path).
- :func:`fused_pass`: ``sequential=group`` in one forward pass of the whole calibration batch,
  each group solved by a pre-hook the moment its input arrives.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from torch import Tensor, nn

from toolkit.engine.capture import LayerInputs, run_layer
from toolkit.engine.solve import prune_group
from toolkit.engine.state import RunState
from toolkit.engine.stats import GroupStats, StopForward, capture_inputs
from toolkit.errors import ToolkitError
from toolkit.methods.base import LinearStats
from toolkit.models.layers import get_weight, layer_linears


def fused_pass(
    run: RunState, layer: nn.Module, linears: dict[str, nn.Module], inputs: LayerInputs, groups: list[list[str]],
) -> tuple[Tensor, Tensor | None]:
    """``sequential=group`` in one forward pass of the whole calibration batch.

    A pre-hook on each group's first linear sees X* (every window at once, the earlier groups
    already pruned), builds the group's statistics, solves and writes back the group's weights,
    and lets the forward go on with them: the pass's output is the pruned layer's output Y*.
    The dense layer runs first only where it is needed: on every window for the cross statistics
    (its group inputs are kept) or for ``propagate=dense``; otherwise on the first
    ``error_windows`` windows, for the layer output error, and not at all when that error is not
    measured (``error="none"``).

    Returns (Y* for all windows, the dense Y for all windows, the first few, or None).
    """
    index = run.layer
    heads = {group[0]: group for group in groups}
    full_dense = run.needs_cross or run.propagate == "dense"
    dense_inputs: dict[str, Tensor] = {}
    reference_inputs = inputs if full_dense else inputs.head(run.cfg.error_windows)
    watched = {name: linears[name] for name in heads} if run.needs_cross else {}
    phase = "statistics" if full_dense else "error"
    dense = None
    if full_dense or run.measures_error:
        with run.timer.section(phase), capture_inputs(watched, dense_inputs.__setitem__):
            dense = run_layer(layer, reference_inputs, 0)
    pending = set(heads)

    def hook(name: str) -> Callable:
        def prune_before_use(module: nn.Module, args: tuple) -> None:
            if name not in pending:
                raise ToolkitError(f"layer {index} {name} runs twice in one forward pass; use --fused off")
            pending.discard(name)
            run.check_cancel()
            with run.timer.section("statistics"):
                acc = GroupStats(get_weight(module).shape[1], run.device, run.needs_cross, run.gram_limit)
                acc.add(args[0].detach(), dense_inputs.get(name))
                stats = acc.finish(f"layer {index} {name}")
            prune_group(run, linears, heads[name], stats)

        return prune_before_use

    handles = [linears[name].register_forward_pre_hook(hook(name)) for name in heads]
    try:
        with run.timer.section("propagation"):  # the pruned pass: solves inside it are charged to solve
            pruned = run_layer(layer, inputs, 0)
    finally:
        for handle in handles:
            handle.remove()
    dense_inputs.clear()
    if pending:
        raise ToolkitError(f"layer {index}: {sorted(pending)} never ran in the pruned pass; use --fused off")
    return pruned, dense


def sample_batches(run: RunState, inputs: LayerInputs) -> int:
    """How many batches hold the first ``error_windows`` windows (the output error's sample)."""
    need, batches = run.cfg.error_windows, 0
    for hidden in inputs.hidden:
        if need <= 0:
            break
        need -= hidden.shape[0]
        batches += 1
    return batches


def gather_stats(  # noqa: PLR0913 - the passes' variants, keyword arguments with defaults
    run: RunState,
    layer: nn.Module,
    inputs: LayerInputs,
    groups: list[list[str]],
    dense_out: list[Tensor] | None = None,
    dense_layer: nn.Module | None = None,
    keep_batches: int | None = None,
) -> list[LinearStats]:
    """One pass of ``layer`` over all batches accumulating the statistics of ``groups``.

    With ``dense_out`` the pass of the first ``keep_batches`` batches (all when None) runs to the
    end and keeps the layer's outputs; the others stop once the groups' inputs were seen. A
    method that needs no statistics (magnitude) sees only those batches, or the sample's when none is
    kept (``error="none"``): its Gram matrix serves the reported per-linear error alone.
    ``dense_layer`` (the unpruned copy) supplies the dense-path inputs for the cross statistics.
    """
    linears = layer_linears(layer)
    heads = {group[0]: linears[group[0]] for group in groups}
    acc = {name: GroupStats(get_weight(m).shape[1], run.device, run.needs_cross, run.gram_limit)
           for name, m in heads.items()}
    kept = len(inputs.hidden) if keep_batches is None else keep_batches
    batches = max(kept, sample_batches(run, inputs)) if not run.spec.needs and dense_out is not None \
        else len(inputs.hidden)
    dense_modules = dict(dense_layer.named_modules()) if dense_layer is not None else {}
    dense_heads = {name: dense_modules[name] for name in heads} if dense_layer is not None else {}
    for b in range(batches):
        run.check_cancel()
        keep = dense_out is not None and b < kept
        seen: dict[str, Tensor] = {}
        with run.timer.section("statistics"), capture_inputs(heads, seen.__setitem__, None if keep else set(heads)):
            try:
                out = run_layer(layer, inputs, b)
                if keep and dense_out is not None:
                    dense_out.append(out)
            except StopForward:
                pass
        dense_seen: dict[str, Tensor] = {}
        with run.timer.section("statistics"):
            if dense_layer is not None:
                with capture_inputs(dense_heads, dense_seen.__setitem__, set(heads)), contextlib.suppress(StopForward):
                    run_layer(dense_layer, inputs, b)
            for name, stats in acc.items():
                stats.add(seen[name], dense_seen.get(name, seen[name]) if run.needs_cross else None)
    return [acc[group[0]].finish(f"layer {run.layer} {group[0]}") for group in groups]
