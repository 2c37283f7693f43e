"""Name → :class:`MethodSpec`, with "did you mean" errors (CONTRIBUTING.md R11)."""

from __future__ import annotations

from collections.abc import Iterable

from toolkit.errors import ToolkitError, suggest
from toolkit.methods.base import MethodSpec


def build_registry(specs: Iterable[MethodSpec]) -> dict[str, MethodSpec]:
    """One dict, duplicate names refused."""
    registry: dict[str, MethodSpec] = {}
    for spec in specs:
        if spec.name in registry:
            raise ValueError(f"method {spec.name!r} registered twice")
        registry[spec.name] = spec
    return registry


def lookup(registry: dict[str, MethodSpec], name: str) -> MethodSpec:
    """The spec called ``name`` or a :class:`ToolkitError` naming the closest and all methods."""
    if name in registry:
        return registry[name]
    raise ToolkitError(
        f"unknown method {name!r}.{suggest(name, registry)} Available: {', '.join(sorted(registry))}"
    )
