"""The method registry: one explicit dict (STYLE R11). A new method = 1 file + 1 line here."""

from __future__ import annotations

from toolkit.methods import (
    awp,
    awq,
    fista,
    gptq,
    magnitude,
    numerical,
    rtn,
    sparsegpt,
    structured_scores,
    thanos,
    two_stage,
    wanda,
)
from toolkit.methods.base import LinearStats, MethodSpec, PruneResult, SolveContext, Stat
from toolkit.methods.registry import build_registry, lookup

METHODS: dict[str, MethodSpec] = build_registry(
    (
        magnitude.SPEC,
        wanda.SPEC,
        sparsegpt.SPEC,
        fista.SPEC,
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
    )
)


def get_method(name: str) -> MethodSpec:
    """The method called ``name``; unknown names get "Did you mean" and the list."""
    return lookup(METHODS, name)


__all__ = ["METHODS", "LinearStats", "MethodSpec", "PruneResult", "SolveContext", "Stat", "get_method"]
