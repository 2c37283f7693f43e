"""The sequential prune+quantize baselines of the AWP paper (Tables 4-5), per linear on one Gram.

- ``wanda+awq`` (prune first): Wanda's keep-mask M on W (per output row, or n:m), then AWQ on
  W ⊙ M (the scale and clipping searches see the zeros, as AWQ run on a pruned model does).
- ``awq+wanda`` (quantize first): AWQ on W gives Ŵ = Q(W·diag(s))·diag(s)⁻¹, then Wanda's mask
  of Ŵ (score |Ŵ_ij|·‖X_j‖).

Both return ``keep_mask`` = M, ``weight`` = Ŵ ⊙ M and ``quant`` = AWQ's
:class:`~toolkit.methods.awq.ScaledQuantState` with the codes of pruned weights set to their group's
zero point, so ``weight == dequantize(quant) / input_scale`` exactly and pruned weights are exactly
0 (see :mod:`toolkit.methods.awq` for why the export refuses AWQ states). The paper's pipelines run
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
from toolkit.spec.targets import NM, Target, Unstructured


@dataclass(frozen=True)
class TwoStageConfig:
    """Options of the AWQ stage (the Wanda stage has none)."""

    n_grid: int = option(20, "AWQ α grid {0, 1/n, …, (n−1)/n} (1 = no scaling)")
    clip: str = option("auto", "AWQ clipping search: auto skips q/k projections, on, off",
                       choices=("auto", "on", "off"))

    def awq(self) -> awq.AWQConfig:
        """The AWQ stage's config."""
        return awq.AWQConfig(n_grid=self.n_grid, clip=self.clip)


def _finish(state: awq.ScaledQuantState, keep: Tensor, info: dict, order: str) -> PruneResult:
    """Zero-point codes off the mask; weight = dequantize(state)/s (exact zeros off the mask)."""
    masked = mask_state(state, keep)
    state = awq.ScaledQuantState(masked.codes, masked.scales, masked.zeros, masked.spec, state.input_scale)
    return PruneResult(weight=awq.effective_weight(state), keep_mask=keep, info=info | {"order": order},
                       quant=state)


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


WANDA_AWQ = MethodSpec(
    name="wanda+awq",
    fn=prune_then_quantize,
    config=TwoStageConfig,
    needs=frozenset({Stat.GRAM}),
    targets=(Unstructured, NM),
    summary="prune with Wanda, then quantize the pruned weight with AWQ (AWP paper, Tables 4-5)",
    produces=frozenset({Produces.MASK, Produces.QUANT}),
    saves_quant=False,
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
)
