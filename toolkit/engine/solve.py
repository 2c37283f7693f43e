"""Solve one group of linears with a linear-scope method, write the results back, measure them.

For every linear of the group: the method gets W (out, in) float32, the group's statistics, the
run's sparsity target and a :class:`SolveContext` carrying the run's quantization grid, and
returns a :class:`PruneResult`. The engine then

1. derives the weight to write: the method's weight, or, when it returned a quantization state,
   ``state.effective_weight()`` (``dequantize(state)``) with the pruned entries zeroed (the state is the truth,
   CONTRIBUTING.md R3);
2. writes it through the run's :class:`~toolkit.engine.writeback.WriteBack` journal (undone on failure);
3. measures rel_error = ‖(W* − W)X*‖/‖WX*‖ = sqrt(tr(ΔW G* ΔWᵀ)/tr(W G* Wᵀ)) and, with the cross
   statistics, rel_error_dense = ‖W*X* − WX‖/‖WX‖ from tr(W*G*W*ᵀ) − 2tr(W*CWᵀ) + tr(WGWᵀ);
4. counts the sparsity from the keep-mask (never from exact zeros), hands the mask and the state
   to the run's sinks and emits :class:`SublayerPruned`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from toolkit.engine.state import RunState
from toolkit.errors import NumericalError, ToolkitError
from toolkit.events import MaskRefined, SublayerPruned
from toolkit.methods.base import SOLVER_DTYPE, LinearStats, PruneResult, SolveContext
from toolkit.methods.chunks import row_chunks
from toolkit.methods.dsnot import dsnot_refine
from toolkit.methods.permute import permuted_solve
from toolkit.methods.quant_grid import bits_per_weight
from toolkit.models.layers import get_weight
from toolkit.runtime.precision import full_precision
from toolkit.spec.targets import NM


def prune_group(run: RunState, linears: dict[str, nn.Module], group: list[str], stats: LinearStats) -> None:
    """Solve, write back and report every linear of ``group`` (names into ``linears``) of layer ``run.layer``.

    The solves run in float32 with autocast off, also when the layer's forward runs in bf16.
    """
    with full_precision(run.device):
        _prune_group(run, linears, group, stats)


def _prune_group(run: RunState, linears: dict[str, nn.Module], group: list[str], stats: LinearStats) -> None:
    if run.spec.group_fn is not None and run.fold:  # a scale shared by the group: every weight at once
        _solve_group_at_once(run, linears, group, stats)
        return
    index = run.layer
    for name in group:
        run.check_cancel()
        module = linears[name]
        W = _weight(run, module, name)
        ctx = SolveContext(layer=index, name=name, quant=run.quant, emit=run.emit, cancelled=run.cancelled)
        t0 = time.perf_counter()
        with run.timer.section("solve"):
            if run.compression.permute:  # inputs permuted for the solve, the result mapped back (methods/permute.py)
                result = permuted_solve(run.spec, W.clone(), stats, run.target, run.method_cfg, ctx)  # type: ignore[arg-type]
            else:  # a method that may write into W gets a copy; W stays the "before" of the error and the report
                weight_in = W if run.spec.reads_weight_only else W.clone()
                result = run.spec.fn(weight_in, stats, run.target, run.method_cfg, ctx)
        if run.cfg.refine is not None and run.cfg.refine.applies_to(name):
            with run.timer.section("refine"):
                result = refine_mask(run, name, W, result, stats)
        _write(run, module, name, W, result, time.perf_counter() - t0, stats)


def _solve_group_at_once(run: RunState, linears: dict[str, nn.Module], group: list[str], stats: LinearStats) -> None:
    """Solve a group at once (``MethodSpec.group_fn``, a run that folds shared input scales) and write every result.

    The solve's seconds are shared out evenly among the group's linears in their reports.
    """
    run.check_cancel()
    weights = {name: _weight(run, linears[name], name) for name in group}
    ctx = SolveContext(layer=run.layer, name=group[0], quant=run.quant, emit=run.emit, cancelled=run.cancelled,
                       foldable=run.foldable(group))
    t0 = time.perf_counter()
    with run.timer.section("solve"):
        results = run.spec.group_fn({name: W.clone() for name, W in weights.items()}, stats,  # type: ignore[misc]
                                    run.target, run.method_cfg, ctx)
    seconds = (time.perf_counter() - t0) / len(group)
    for name in group:
        _write(run, linears[name], name, weights[name], results[name], seconds, stats)


def _weight(run: RunState, module: nn.Module, name: str) -> Tensor:
    """The linear's (out, in) weight in float32 for a solve; one line when it holds NaN/Inf.

    The write-back swaps the parameter's data, so this tensor stays the "before" of the error and the report.
    """
    W = get_weight(module).detach().to(SOLVER_DTYPE)
    if not all_finite(W):
        raise NumericalError(f"layer {run.layer} {name}: the weight has NaN/Inf entries; the checkpoint is broken")
    return W


def _write(  # noqa: PLR0913 - what both solve paths (one linear, a group at once) hand over per linear
    run: RunState, module: nn.Module, name: str, W: Tensor, result: PruneResult, seconds: float, stats: LinearStats,
) -> None:
    """Write a solved linear back through the journal and report it (W: its weight before the solve)."""
    keep = result.keep_mask.to(W.device, torch.bool)
    new = _written_weight(run, run.layer, name, W, keep, result)
    if result.quant is not None:  # the weight written is derived from the state: the method's copy can go now
        result = dataclasses.replace(result, weight=new)
    with run.timer.section("writeback"):
        run.writeback.weight(module, new, run.storage_dtype)
    _report(run, _Solved(name, W, new, keep, result, seconds), stats)


def _written_weight(run: RunState, index: int, name: str, W: Tensor, keep: Tensor, result: PruneResult) -> Tensor:
    """The (out, in) float32 weight to write: the method's, or derived from its quantization state."""
    if run.quant is not None and result.quant is None:
        raise ToolkitError(f"{run.spec.name} returned no quantization state for layer {index} {name} "
                           f"although {run.quant} was asked for")
    if result.quant is not None:
        new = result.quant.to(W.device).effective_weight().masked_fill_(~keep, 0.0)  # a fresh tensor: in place
    else:
        new = result.weight.to(SOLVER_DTYPE)
    assert new.shape == W.shape, f"{run.spec.name} returned shape {tuple(new.shape)} for {tuple(W.shape)}"
    assert keep.shape == W.shape, f"{run.spec.name} returned a keep-mask of shape {tuple(keep.shape)}"
    if not all_finite(new):
        raise NumericalError(f"layer {index} {name}: {run.spec.name} produced NaN/Inf weights")
    return new


def all_finite(W: Tensor) -> bool:
    """``torch.isfinite(W).all()`` of an (out, in) weight, a block of rows at a time.

    ``isfinite`` allocates several (out, in) temporaries (an absolute value among them): on a 7B MLP linear
    that was 300 MiB at the host peak; by blocks it is a few MiB.
    """
    return all(bool(torch.isfinite(W[rows]).all()) for rows in row_chunks(W.shape[0], W.shape[1]))


def refine_mask(run: RunState, name: str, W: Tensor, result: PruneResult, stats: LinearStats) -> PruneResult:
    """The method's result with its keep-mask refined by DSnoT (toolkit/methods/dsnot.py); emits MaskRefined.

    The refined weight keeps the method's values where both masks keep a weight and takes W's
    dense values where DSnoT revived one; ‖ΔW X*‖/‖W X*‖ of both masks goes into the event.
    """
    refine = run.cfg.refine
    assert refine is not None and stats.col_mean is not None, "refinement needs the inputs' mean per column"
    if result.quant is not None:
        raise ToolkitError(f"--refine {refine.label} refines sparsity masks; {run.spec.name} returned a quantized "
                           "state: drop --refine or --quant")
    target = run.target
    group = target.m if isinstance(target, NM) else 0
    refined = dsnot_refine(W, result.weight, result.keep_mask.to(W.device, torch.bool), stats.col_mean,
                           stats.col_sq_norms, refine, group=group)
    before = reconstruction_errors(W, result.weight.to(SOLVER_DTYPE), stats)[0]
    after = reconstruction_errors(W, refined.weight, stats)[0]
    run.emit(MaskRefined(layer=run.layer, name=name, swaps=refined.swaps, cycles=refined.cycles,
                         expected_error_before=refined.expected_error_before,
                         expected_error_after=refined.expected_error_after,
                         rel_error_before=before, rel_error_after=after))
    info = {**result.info, "dsnot_swaps": refined.swaps, "rel_error_before_refine": before}
    return dataclasses.replace(result, weight=refined.weight, keep_mask=refined.keep_mask, info=info)


@dataclass(frozen=True)
class _Solved:
    """What solving one linear gave: the weight before and the one written, the keep-mask, the result."""

    name: str
    weight: Tensor  # (out, in) float32, before
    new: Tensor  # (out, in) float32, written
    keep: Tensor  # (out, in) bool
    result: PruneResult
    seconds: float


def _report(run: RunState, solved: _Solved, stats: LinearStats) -> None:
    """Record the linear in the run's result, hand its mask and state to the sinks, emit SublayerPruned."""
    name, W, new, keep, result, seconds = (solved.name, solved.weight, solved.new, solved.keep, solved.result,
                                           solved.seconds)
    index, numel = run.layer, W.numel()
    kept = int(keep.sum())
    bits, quant_error = math.nan, math.nan
    if result.quant is not None:
        bits = bits_per_weight(result.quant.spec, W.shape[1])
        base = float(torch.linalg.vector_norm(W * keep))
        quant_error = float(torch.linalg.vector_norm((new - W).mul_(keep))) / base if base > 0 else 0.0
        run.result.quant[(index, name)] = result.quant.spec
    with run.timer.section("error"):  # a data-free run has no statistics (count 0): its error is the weights'
        rel, rel_dense = reconstruction_errors(W, new, stats) if stats.count else (math.nan, math.nan)
        weight_rel = math.nan if stats.count else weight_error(W, new)
    event = SublayerPruned(
        layer=index, name=name, shape=list(W.shape), sparsity=1.0 - kept / numel,
        rel_error=rel, rel_error_dense=rel_dense, damping=result.damping, seconds=seconds,
        info=dict(result.info), bits=bits, quant_rel_error=quant_error, params_before=numel, params_after=numel,
        weight_rel_error=weight_rel,
    )
    run.result.layers.append(event.to_dict())
    run.result.kept[(index, name)] = kept
    run.result.sizes[(index, name)] = numel
    run.on_mask(index, name, keep.to("cpu"))
    if result.quant is not None:
        run.on_quant(index, name, result.quant.to("cpu"))
        if run.fold:  # its input scale is folded when the layer is done (engine/fold.py)
            run.layer_states[name] = result.quant
    run.emit(event)


def weight_error(W: Tensor, W_new: Tensor) -> float:
    """‖Ŵ − W‖_F / ‖W‖_F: the error a data-free run can state (no inputs to weigh it with)."""
    base = float(torch.linalg.vector_norm(W))
    return float(torch.linalg.vector_norm(W_new - W)) / base if base > 0 else 0.0


def reconstruction_errors(W: Tensor, W_new: Tensor, stats: LinearStats) -> tuple[float, float]:
    """(‖ΔW X*‖/‖W X*‖, ‖W*X* − WX‖/‖WX‖) from the Gram matrices (nan without cross stats).

    ‖ΔW X*‖² = tr(ΔW G* ΔWᵀ); with a token sample S (SᵀS = G*) it is ‖S ΔWᵀ‖², O(T·in·out) instead of O(in²·out).
    """
    dW = W_new - W
    if stats.sample is not None:
        S = stats.sample
        base = float((S @ W.t()).square().sum())
        change = float((S @ dW.t()).square().sum())
    else:
        G = stats.gram
        base = float(((W @ G) * W).sum())
        change = float(((dW @ G) * dW).sum())
    rel = math.sqrt(max(change, 0.0) / base) if base > 0 else 0.0
    if stats.cross is None or stats.dense_gram is None:
        return rel, math.nan
    dense = float(((W @ stats.dense_gram) * W).sum())
    sq = float(((W_new @ G) * W_new).sum()) - 2 * float(((W_new @ stats.cross) * W).sum()) + dense
    rel_dense = math.sqrt(max(sq, 0.0) / dense) if dense > 0 else 0.0
    return rel, rel_dense
