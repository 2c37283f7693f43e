"""The compression methods: pure solvers and their registry.

The compression methods: pure solvers that take a weight and its statistics and return a new
weight, a keep-mask and/or a quantization state (docs/architecture.md "Statistics live in the engine").

One file per method plus the registry below (one line per method: CONTRIBUTING.md R11). Shared pieces: the contract
(:mod:`~toolkit.methods.base`), keep-mask builders (:mod:`~toolkit.methods.masks`), the quantization
grid (:mod:`~toolkit.methods.quant_grid`); block-scope methods in :mod:`toolkit.methods.block`.
May import :mod:`toolkit.spec`, :mod:`toolkit.events`, :mod:`toolkit.errors` and torch; never the
engine, a run, the models or a surface.
"""

from __future__ import annotations

from toolkit.methods import (
    alps,
    awp,
    awq,
    fista,
    gptq,
    magnitude,
    ria,
    rtn,
    sparsegpt,
    thanos,
    two_stage,
    wanda,
)
from toolkit.methods.base import LinearStats, MethodSpec, PruneResult, SolveContext, Stat
from toolkit.methods.block import depth, numerical
from toolkit.methods.block import scores as structured_scores
from toolkit.methods.registry import build_registry, lookup

METHODS: dict[str, MethodSpec] = build_registry(
    (
        magnitude.SPEC,
        wanda.SPEC,
        ria.SPEC,
        sparsegpt.SPEC,
        fista.SPEC,
        alps.SPEC,
        thanos.SPEC,
        rtn.SPEC,
        gptq.SPEC,
        awq.SPEC,
        awp.SPEC,
        two_stage.WANDA_AWQ,
        two_stage.AWQ_WANDA,
        numerical.SPEC,
        structured_scores.FLAP,
        structured_scores.WANDA_SP,
        structured_scores.MAGNITUDE_SP,
        depth.SPEC,
    )
)


def get_method(name: str) -> MethodSpec:
    """The method called ``name``; unknown names get "Did you mean" and the list."""
    return lookup(METHODS, name)


__all__ = ["METHODS", "LinearStats", "MethodSpec", "PruneResult", "SolveContext", "Stat", "get_method"]
