"""Round-to-nearest (RTN): every weight to the nearest point of its group's min-max grid.

For each row and group g of ``group_size`` consecutive inputs (``ctx.quant``; notation of
:mod:`toolkit.methods.quant_grid`): s = max(max w_g − min w_g, 1e-5)/qmax, z = clamp(−round(min w_g / s), 0, qmax),
q = clamp(round(w/s) + z, 0, qmax), ŵ = (q − z)·s (symmetric: s = 2·max|w_g|/qmax, z = (qmax+1)/2).
No calibration data is used: the baseline of GPTQ, AWQ and AWP (whose quantize mode starts from it).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from toolkit.methods.base import SOLVER_DTYPE, LinearStats, MethodSpec, Produces, PruneResult, SolveContext, Stat
from toolkit.methods.quant_base import all_kept, quant_only
from toolkit.methods.quant_grid import dequantize, quantize
from toolkit.spec.targets import Target


@dataclass(frozen=True)
class RTNConfig:
    """RTN has no options: the grid is the run's ``--quant`` spec."""


def quantize_linear(W: Tensor, stats: LinearStats, target: Target | None, cfg: RTNConfig, ctx: SolveContext
                    ) -> PruneResult:
    """W (out, in) → dequantize(RTN(W)) with its QuantState; keep-mask all True. ``stats`` is unused."""
    spec = quant_only(target, ctx, "rtn")
    state = quantize(W.to(SOLVER_DTYPE), spec)
    return PruneResult(weight=dequantize(state), keep_mask=all_kept(W), quant=state)


SPEC = MethodSpec(
    name="rtn",
    fn=quantize_linear,
    config=RTNConfig,
    needs=frozenset({Stat.COL_NORMS}),  # nothing really; the cheapest statistic (the engine measures errors)
    targets=(),
    summary="round-to-nearest on the min-max grid of every group (no calibration)",
    produces=frozenset({Produces.QUANT}),
    reads_weight_only=True,  # W is only read: the engine hands over the layer's weight, not a copy
    data_free=True,  # the engine skips the calibration path (toolkit/engine/data_free.py)
)
