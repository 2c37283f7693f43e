"""Shared checks of the quantizing solvers (rtn, gptq, awq, awp and the two-stage pipelines).

A quantizing solver gets its grid from ``ctx.quant`` (a :class:`~toolkit.spec.compression.QuantSpec`) and its
sparsity from ``target``; these helpers turn a missing or unsupported combination into a one-line
:class:`ToolkitError` and non-finite statistics into a :class:`NumericalError`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit.errors import NumericalError, ToolkitError
from toolkit.methods.base import SOLVER_DTYPE, LinearStats, SolveContext
from toolkit.spec.compression import QuantSpec
from toolkit.spec.targets import NM, Target, Unstructured, validate_for_shape


def checked_gram(W: Tensor, stats: LinearStats, ctx: SolveContext, method: str) -> Tensor:
    """``stats.gram`` (in, in) as float32 on W's device; NumericalError if it or W is not finite."""
    if not bool(torch.isfinite(stats.gram).all()):
        raise NumericalError(f"{ctx.name}: the Gram matrix has non-finite entries; check the calibration "
                             f"inputs (overflow in half precision?) before running {method}")
    if not bool(torch.isfinite(W).all()):
        raise NumericalError(f"{ctx.name}: the weight has non-finite entries; {method} cannot quantize it")
    return stats.gram.to(W.device, SOLVER_DTYPE)


def stats_on(C: Tensor, stats: LinearStats) -> LinearStats:
    """``stats`` with the Gram replaced by ``C`` (float32, the solver's device) and ‖X_j‖²/N moved there."""
    col_sq = None if stats.col_sq is None else stats.col_sq.to(C.device, SOLVER_DTYPE)
    return LinearStats(gram=C, count=stats.count, col_sq=col_sq, gram_count=stats.gram_count)


def quant_only(target: Target | None, ctx: SolveContext, method: str) -> QuantSpec:
    """The grid of a quantize-only method; ToolkitError for a sparsity target or a missing grid."""
    if target is not None:
        raise ToolkitError(f"{method} only quantizes and cannot meet sparsity {target}: "
                           "use awp, wanda+awq or awq+wanda to prune and quantize")
    if ctx.quant is None:
        raise ToolkitError(f"{method} quantizes and needs a grid, e.g. --quant int4:g128")
    return ctx.quant


def joint_spec(shape: tuple[int, int], target: Target | None, ctx: SolveContext, method: str
               ) -> tuple[Unstructured | NM, QuantSpec]:
    """(target, grid) of a prune-and-quantize pipeline; ToolkitError when either is missing or unmet."""
    if target is None or ctx.quant is None:
        raise ToolkitError(f"{method} prunes and quantizes: give both, e.g. --sparsity 50% --quant int4:g128")
    return sparse_target(shape, target, method), ctx.quant


def sparse_target(shape: tuple[int, int], target: Target, method: str) -> Unstructured | NM:
    """The target if the row-wise projections can meet it on an (out, in) weight, else ToolkitError."""
    if not isinstance(target, Unstructured | NM):
        raise ToolkitError(f"{method} supports unstructured (50%) and n:m (2:4) sparsity, not {target}")
    validate_for_shape(target, shape)
    return target


def all_kept(W: Tensor) -> Tensor:
    """The keep-mask of a quantize-only result: all True, (out, in)."""
    return torch.ones_like(W, dtype=torch.bool)
