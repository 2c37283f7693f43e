"""The sequential prune+quantize baselines of the AWP paper (Tables 4-5), per linear on one Gram.

- ``wanda+awq`` (prune first): Wanda's keep-mask M on W (per output row, or n:m), then AWQ on
  W ⊙ M (the scale and clipping searches see the zeros, as AWQ run on a pruned model does).
- ``awq+wanda`` (quantize first): AWQ on W gives Ŵ = Q(W·diag(s))·diag(s)⁻¹, then Wanda's mask
  of Ŵ (score |Ŵ_ij|·‖X_j‖).

Both return ``keep_mask`` = M, ``weight`` = Ŵ ⊙ M and ``quant`` = AWQ's
:class:`~toolkit.methods.awq.ScaledQuantState` with the codes of pruned weights set to their group's
zero point, so ``weight == dequantize(quant) / input_scale`` exactly and pruned weights are exactly
0. With ``scale=own`` (the default) every linear has its own s and the run does not save (see
:mod:`toolkit.methods.awq`); with ``scale=shared`` the linears fed one tensor share one s, searched on
their stacked (masked, for ``wanda+awq``) rows, which the engine folds into the norm or linear feeding
them, so the run saves like AWQ's (:func:`prune_then_quantize_group`, :func:`quantize_then_prune_group`).
The paper's pipelines run
the stages model-wide, each on its own calibration pass (the second stage sees the activations of
the model the first produced); here both stages use the linear's one set of statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from toolkit.methods import awq, wanda
from toolkit.methods.base import (
    SOLVER_DTYPE,
    LinearStats,
    MethodSpec,
    Produces,
    PruneResult,
    SolveContext,
    Stat,
    option,
)
from toolkit.methods.quant_base import checked_gram, joint_spec, stats_on
from toolkit.methods.quant_grid import mask_state
from toolkit.spec.compression import QuantSpec
from toolkit.spec.targets import NM, Target, Unstructured


@dataclass(frozen=True)
class TwoStageConfig:
    """Options of the AWQ stage (the Wanda stage has none)."""

    n_grid: int = option(20, "AWQ α grid {0, 1/n, …, (n−1)/n} (1 = no scaling)")
    clip: str = option("auto", "AWQ clipping search: auto skips q/k projections, on, off",
                       choices=("auto", "on", "off"))
    scale: str = option("own", "AWQ input scale: own per linear (not savable); shared: one per group of linears "
                        "fed one tensor, folded into what feeds them so the run saves (as awq's)",
                        choices=("own", "shared"))

    def awq(self) -> awq.AWQConfig:
        """The AWQ stage's config."""
        return awq.AWQConfig(n_grid=self.n_grid, clip=self.clip, scale=self.scale)


def _finish(state: awq.ScaledQuantState, keep: Tensor, info: dict, order: str,
            scale: tuple[Tensor, float] | None = None, shared: bool = False) -> PruneResult:
    """Zero-point codes off the mask; weight = dequantize(state)/s (exact zeros off the mask).

    ``shared``: the state of a group solve, whose ``scale`` None means s = 1 (a plain grid, :func:`awq.grid_of`).
    """
    masked = mask_state(state, keep)
    state = awq.ScaledQuantState(masked.codes, masked.scales, masked.zeros, masked.spec, state.input_scale)
    grid = awq.grid_of(state, scale) if shared else state
    if shared:
        info = info | {"scale": "shared" if scale is not None else "left out"}
    return PruneResult(weight=awq.effective_weight(grid), keep_mask=keep, info=info | {"order": order}, quant=grid)


def _group_setup(weights: dict[str, Tensor], stats: LinearStats, target: Target | None, ctx: SolveContext,
                 method: str) -> tuple[Target, QuantSpec, dict[str, Tensor], LinearStats]:
    """The sparsity and grid of a group solve, its weights in float32 and the statistics on their device."""
    first = next(iter(weights.values()))
    sparse, spec = joint_spec((first.shape[0], first.shape[1]), target, ctx, method)
    weights = {name: W.to(SOLVER_DTYPE) for name, W in weights.items()}
    return sparse, spec, weights, stats_on(checked_gram(weights[next(iter(weights))], stats, ctx, method), stats)


def prune_then_quantize(W: Tensor, stats: LinearStats, target: Target | None, cfg: TwoStageConfig,
                        ctx: SolveContext) -> PruneResult:
    """Wanda, then AWQ on the pruned weight (``wanda+awq``)."""
    sparse, spec = joint_spec((W.shape[0], W.shape[1]), target, ctx, "wanda+awq")
    W = W.to(SOLVER_DTYPE)
    stats = stats_on(checked_gram(W, stats, ctx, "wanda+awq"), stats)
    keep = wanda.prune(W, stats, sparse, wanda.WandaConfig(), ctx).keep_mask
    state, info = awq.awq_state(W * keep, stats, spec, cfg.awq(), ctx.name)
    return _finish(state, keep, info, "wanda+awq")


def quantize_then_prune(W: Tensor, stats: LinearStats, target: Target | None, cfg: TwoStageConfig,
                        ctx: SolveContext) -> PruneResult:
    """AWQ, then Wanda on the quantized weight (``awq+wanda``)."""
    sparse, spec = joint_spec((W.shape[0], W.shape[1]), target, ctx, "awq+wanda")
    W = W.to(SOLVER_DTYPE)
    stats = stats_on(checked_gram(W, stats, ctx, "awq+wanda"), stats)
    state, info = awq.awq_state(W, stats, spec, cfg.awq(), ctx.name)
    keep = wanda.prune(awq.effective_weight(state), stats, sparse, wanda.WandaConfig(), ctx).keep_mask
    return _finish(state, keep, info, "awq+wanda")


def prune_then_quantize_group(weights: dict[str, Tensor], stats: LinearStats, target: Target | None,
                              cfg: TwoStageConfig, ctx: SolveContext) -> dict[str, PruneResult]:
    """``wanda+awq`` with ``scale=shared``: Wanda masks, then AWQ with one input scale for the group.

    Each linear's Wanda mask M_i, then one s searched on the stacked masked rows [W_1 ⊙ M_1; …; W_k ⊙ M_k]
    (:func:`awq.group_input_scale`), then AWQ's clipping and grid per linear with that s.
    """
    sparse, spec, weights, stats = _group_setup(weights, stats, target, ctx, "wanda+awq")
    keeps = {name: wanda.prune(W, stats, sparse, wanda.WandaConfig(), ctx).keep_mask for name, W in weights.items()}
    masked = {name: W * keeps[name] for name, W in weights.items()}
    scale = awq.group_input_scale(masked, stats, spec, cfg.awq(), ctx)
    results = {}
    for name, W in masked.items():
        state, info = awq.awq_state(W, stats, spec, cfg.awq(), name, scale or awq.unit_scale(W))
        results[name] = _finish(state, keeps[name], info, "wanda+awq", scale, shared=True)
    return results


def quantize_then_prune_group(weights: dict[str, Tensor], stats: LinearStats, target: Target | None,
                              cfg: TwoStageConfig, ctx: SolveContext) -> dict[str, PruneResult]:
    """``awq+wanda`` with ``scale=shared``: AWQ with one input scale for the group, then Wanda masks.

    One s for the group (:func:`awq.group_input_scale`), then each linear's Wanda mask of its
    Ŵ_i = Q(W_i·diag s)·diag(s)⁻¹.
    """
    sparse, spec, weights, stats = _group_setup(weights, stats, target, ctx, "awq+wanda")
    scale = awq.group_input_scale(weights, stats, spec, cfg.awq(), ctx)
    results = {}
    for name, W in weights.items():
        state, info = awq.awq_state(W, stats, spec, cfg.awq(), name, scale or awq.unit_scale(W))
        keep = wanda.prune(awq.effective_weight(state), stats, sparse, wanda.WandaConfig(), ctx).keep_mask
        results[name] = _finish(state, keep, info, "awq+wanda", scale, shared=True)
    return results


def _savable(cfg: TwoStageConfig) -> bool:
    return cfg.scale == "shared"


WANDA_AWQ = MethodSpec(
    name="wanda+awq",
    fn=prune_then_quantize,
    config=TwoStageConfig,
    needs=frozenset({Stat.GRAM}),
    targets=(Unstructured, NM),
    summary="prune with Wanda, then quantize the pruned weight with AWQ (AWP paper, Tables 4-5)",
    produces=frozenset({Produces.MASK, Produces.QUANT}),
    saves_quant=False,
    savable=_savable,
    group_fn=prune_then_quantize_group,
)

AWQ_WANDA = MethodSpec(
    name="awq+wanda",
    fn=quantize_then_prune,
    config=TwoStageConfig,
    needs=frozenset({Stat.GRAM}),
    targets=(Unstructured, NM),
    summary="quantize with AWQ, then prune the quantized weight with Wanda (AWP paper, Tables 4-5)",
    produces=frozenset({Produces.MASK, Produces.QUANT}),
    saves_quant=False,
    savable=_savable,
    group_fn=quantize_then_prune_group,
)
