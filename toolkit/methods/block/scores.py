"""Structured baselines on the same statistics and the same global allocation as ``numerical``.

Per unit scores, higher = keep, in HF layout (``weight`` (out, in)); x_j is input j of o_proj or
down_proj, G = Σxxᵀ/N, μ = Σx/N over the N calibration tokens:

- ``magnitude-sp``: ‖unit weights‖₂, the Frobenius norm of every weight the unit owns (q rows and
  o columns of its query heads, k/v rows of its KV head when it owns it; gate and up rows and the
  down column of a channel). Data-free.
- ``wanda-sp`` (An et al. 2024, FLAP's Wanda-sp): channel score mean_i |W_ij|·‖x_j‖ with
  ‖x_j‖ = sqrt(G_jj) (RMS over tokens); a head unit averages its channels.
- ``flap`` (An et al., AAAI 2024, "Fluctuation-based Adaptive Structured Pruning"): fluctuation
  metric (G_jj − μ_j²)·‖W_:,j‖² (input variance × squared weight column), head = channel mean,
  per-layer standardization (on by default; FLAP standardizes channels before averaging them into
  heads, which the plan reproduces from ``head_channels``), the adaptive global structure of
  :mod:`toolkit.engine.block.plan` and bias compensation (b += W[:, P] μ_P).

Comparison group: all heads and channels of all layers; with standardization every layer and kind
is centred and scaled first, which is what makes heads and channels comparable for these scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from toolkit.methods.base import MethodSpec, Produces, Scope, SolveContext, option
from toolkit.methods.block.base import (
    COMPENSATIONS,
    BlockConfig,
    BlockStats,
    BlockTensors,
    HeadLayout,
    UnitScores,
    column_unit_scores,
    not_a_linear_solver,
)
from toolkit.spec.compression import Unit
from toolkit.spec.targets import Structured


@dataclass(frozen=True)
class MagnitudeSpConfig(BlockConfig):
    """magnitude-sp: standardized per layer by default, no compensation."""

    standardize: bool = option(True, "standardize scores per layer and kind before the global ranking")
    compensate: str = option("none", "least_squares, bias or none (the baseline: none)", COMPENSATIONS)


@dataclass(frozen=True)
class WandaSpConfig(MagnitudeSpConfig):
    """wanda-sp: standardized per layer by default, no compensation."""


@dataclass(frozen=True)
class FlapConfig(BlockConfig):
    """FLAP: standardized per layer and bias compensation by default."""

    standardize: bool = option(True, "standardize scores per layer and kind (FLAP's adaptive structure)")
    compensate: str = option("bias", "bias (FLAP), least_squares or none", COMPENSATIONS)


def _head_energy(tensors: BlockTensors, layout: HeadLayout) -> Tensor:
    """Σ of squared weights each head unit owns (units,)."""
    dh = layout.head_dim
    q, o = tensors["q"], tensors["o"]  # (H·Dh, D), (D, H·Dh)
    per_head = q.reshape(-1, dh, q.shape[1]).pow(2).sum((1, 2)) + o.reshape(o.shape[0], -1, dh).pow(2).sum((0, 2))
    energy = torch.zeros(layout.num_units, dtype=q.dtype, device=q.device)
    energy.index_add_(0, layout.unit_of_head.to(q.device), per_head)
    if layout.owns_kv:
        k, v = tensors["k"], tensors["v"]  # (H_kv·Dh, D)
        kv = (k.reshape(-1, dh, k.shape[1]).pow(2) + v.reshape(-1, dh, v.shape[1]).pow(2)).sum((1, 2))
        energy += kv[layout.kv_of_unit().to(q.device)]
    return energy


def magnitude_score(
    tensors: BlockTensors, stats: BlockStats, layout: HeadLayout, ratio: float, cfg: MagnitudeSpConfig,
    ctx: SolveContext | None = None,
) -> UnitScores:
    """‖unit weights‖₂ for head units and MLP channels (statistics only say which kinds are scored)."""
    not_a_linear_solver("magnitude-sp")(tensors)
    heads = _head_energy(tensors, layout).sqrt() if stats.attn is not None else None
    channels = None
    if stats.mlp is not None:
        energy = tensors["up"].pow(2).sum(1) + tensors["down"].pow(2).sum(0)
        if "gate" in tensors.weights:
            energy = energy + tensors["gate"].pow(2).sum(1)
        channels = energy.sqrt()
    return UnitScores(heads=heads, channels=channels)


def _wanda_columns(W: Tensor, gram: Tensor) -> Tensor:
    """mean_i |W_ij| · sqrt(G_jj) for every input column j (in,)."""
    return W.abs().mean(0) * torch.diagonal(gram).clamp_min(0).sqrt()


def _fluctuation_columns(W: Tensor, gram: Tensor, mean: Tensor) -> Tensor:
    """(G_jj − μ_j²) · ‖W_:,j‖² for every input column j (in,)."""
    return (torch.diagonal(gram) - mean.pow(2)).clamp_min(0) * W.pow(2).sum(0)


def wanda_sp_score(
    tensors: BlockTensors, stats: BlockStats, layout: HeadLayout, ratio: float, cfg: WandaSpConfig,
    ctx: SolveContext | None = None,
) -> UnitScores:
    """Wanda-sp column scores of o_proj (averaged into head units) and down_proj."""
    not_a_linear_solver("wanda-sp")(tensors)
    return column_unit_scores(tensors, stats, layout, lambda role, W, s: _wanda_columns(W, s.gram))


def flap_score(
    tensors: BlockTensors, stats: BlockStats, layout: HeadLayout, ratio: float, cfg: FlapConfig,
    ctx: SolveContext | None = None,
) -> UnitScores:
    """FLAP fluctuation metric of o_proj columns (averaged into head units) and down_proj columns."""
    not_a_linear_solver("flap")(tensors)
    return column_unit_scores(tensors, stats, layout, lambda role, W, s: _fluctuation_columns(W, s.gram, s.mean))


def _spec(name: str, fn: object, config: type, summary: str) -> MethodSpec:
    return MethodSpec(name=name, fn=fn, config=config, needs=frozenset(), targets=(Structured,),  # type: ignore[arg-type]
                      summary=summary, scope=Scope.BLOCK, produces=frozenset({Produces.STRUCTURE}),
                      units=(Unit.HEADS, Unit.CHANNELS, Unit.HEADS_CHANNELS))


MAGNITUDE_SP = _spec("magnitude-sp", magnitude_score, MagnitudeSpConfig,
                     "‖unit weights‖₂ per head/channel, global ranking, no update (data-free baseline)")
WANDA_SP = _spec("wanda-sp", wanda_sp_score, WandaSpConfig, "Σ|W|·‖X‖ per head/channel, global ranking, no update")
FLAP = _spec("flap", flap_score, FlapConfig,
             "FLAP fluctuation metric, per-layer standardization, global structure, bias compensation")
