"""Mask refinement after a method's mask: parse ``--refine dsnot[:iters]``. Torch-free.

DSnoT (Zhang et al., ICLR 2024) swaps pruned and kept weights of each output row, training-free,
to shrink the row's expected reconstruction error (:mod:`toolkit.methods.dsnot`). Each swap
revives one weight and prunes another of the same row, so every row keeps its count and the
total sparsity is the method's.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.errors import ToolkitError

DSNOT = "dsnot"
MLP_PREFIXES = ("mlp", "fc1", "fc2", "feed_forward", "ffn")  # the first name part of an MLP linear, across families
DEFAULT_CYCLES = 50  # swaps per row at most (the DSnoT paper's maximum cycle count)
DEFAULT_THRESHOLD = 0.1 / 2048  # per token: the paper's ε = 0.1 on sums over its 2048-token windows; see Refine
ATTENTION, ALL = "attention", "all"  # the linears refined: the attention's (the reference code's default) or all
DEFAULT_VARIANCE_POWER = 1.0  # the grow score divides W_ij·E[x_j] by Var[x_j]^p (the paper's p)


@dataclass(frozen=True)
class Refine:
    """A mask refinement: ``kind`` (dsnot), at most ``cycles`` swaps per row, stop ``threshold``, variance power.

    ``threshold`` is on |e_i|, the row's expected error per token (inputs are means over tokens);
    the paper's ε = 0.1 is on sums over its 2048-token windows, hence 0.1 / 2048 here (``dsnot:N,ε``
    sets both). ``linears`` is ``attention`` (the DSnoT reference code refines the attention's
    linears and leaves the MLP's masks as the method made them) or ``all`` (``dsnot:N,ε,all``).
    """

    kind: str = DSNOT
    cycles: int = DEFAULT_CYCLES
    threshold: float = DEFAULT_THRESHOLD
    variance_power: float = DEFAULT_VARIANCE_POWER
    linears: str = ATTENTION

    @property
    def label(self) -> str:
        """The text form, ``dsnot:50`` (``dsnot:50,0.01`` with a threshold)."""
        text = f"{self.kind}:{self.cycles}"
        if self.threshold != DEFAULT_THRESHOLD or self.linears != ATTENTION:
            text += f",{self.threshold:g}"
        return text + (f",{self.linears}" if self.linears != ATTENTION else "")

    def to_dict(self) -> dict[str, object]:
        """Plain data for config.json and result.json."""
        return {"kind": self.kind, "cycles": self.cycles, "threshold": self.threshold,
                "variance_power": self.variance_power, "linears": self.linears, "label": self.label}

    def applies_to(self, name: str) -> bool:
        """Whether the linear ``name`` (qualified inside its layer) is refined: MLP linears only with ``all``."""
        return self.linears == ALL or name.split(".")[0] not in MLP_PREFIXES


def parse_refine(text: str | Refine | None) -> Refine | None:
    """``dsnot`` | ``dsnot:N`` | ``dsnot:N,ε`` | ``dsnot:N,ε,all`` | none → :class:`Refine` or None.

    N swap cycles per row, stop threshold ε, ``all`` to refine the MLP's linears too.
    """
    if isinstance(text, Refine) or text is None:
        return text
    text = str(text).strip()
    if not text or text.lower() == "none":
        return None
    name, _, cycles = text.partition(":")
    if name.lower() != DSNOT:
        raise ToolkitError(f"unknown --refine {text!r}: use dsnot or dsnot:N (N swap cycles per row, e.g. dsnot:50)")
    if not cycles:
        return Refine()
    parts = [p.strip() for p in cycles.split(",")]
    linears = parts.pop() if len(parts) == 3 else ATTENTION
    try:
        count = int(parts[0])
        threshold = float(parts[1]) if len(parts) > 1 and parts[1] else DEFAULT_THRESHOLD
    except ValueError:
        count, threshold = 0, DEFAULT_THRESHOLD
    if count < 1 or not threshold >= 0 or len(parts) > 2 or linears not in (ATTENTION, ALL):
        raise ToolkitError(f"--refine {text!r}: use dsnot:N, dsnot:N,ε or dsnot:N,ε,all (N ≥ 1 swap cycles per row, "
                           "ε ≥ 0, all = the MLP's linears too), e.g. dsnot:50")
    return Refine(cycles=count, threshold=threshold, linears=linears)
