"""What a block-scope run did (heads, channels or whole layers removed)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BlockResult:
    """What a block run did; field-compatible with :class:`toolkit.engine.state.EngineResult`.

    ``zeros``/``total`` count projection parameters (q, k, v, o, gate, up, down of every layer)
    removed / before, so ``achieved_sparsity`` is the fraction of them that went.
    """

    layers: list[dict] = field(default_factory=list)
    zeros: int = 0
    total: int = 0
    seconds: float = 0.0
    params_before: int = 0
    params_after: int = 0
    model_params_before: int = 0
    model_params_after: int = 0
    structure: dict = field(default_factory=dict)

    @property
    def achieved_sparsity(self) -> float:
        """Fraction of the projection parameters removed."""
        return self.zeros / self.total if self.total else 0.0
