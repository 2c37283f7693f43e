"""A method that fails on purpose: magnitude pruning, except that one linear of one layer raises."""

from __future__ import annotations

from collections.abc import Callable

from toolkit.errors import ToolkitError
from toolkit.methods import get_method
from toolkit.methods.base import MethodSpec, Stat


def exploding(layer_to_fail: int, error: Callable[[], BaseException] = lambda: ToolkitError("boom")) -> MethodSpec:
    """Magnitude pruning that raises ``error()`` at the up_proj of decoder layer ``layer_to_fail``."""
    base = get_method("magnitude")

    def fn(W, stats, target, cfg, ctx):
        if ctx.layer == layer_to_fail and ctx.name.endswith("up_proj"):
            raise error()
        return base.fn(W, stats, target, cfg, ctx)

    return MethodSpec("exploding", fn, base.config, frozenset({Stat.GRAM}))
