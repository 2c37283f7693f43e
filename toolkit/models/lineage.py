"""Where a model's exact zeros come from: its lineage, written beside its weights.

A model's exact zeros are a sparsity pattern only when something chose them: a pruning run. A
quantized source (a GGUF: Gemma-3-270M's Q4_K_M dequantizes with 6.0 % exact zeros) has zeros
that are rounding, and a quantizer must neither hold them (GPTQ's ``keep_zeros``) nor report a
"pattern NOT kept" for them. So each model PruneLab writes carries ``prunelab_lineage.json``:

- ``origin``: ``"gguf"`` (dequantized once from a GGUF), ``"run"`` (saved by a PruneLab run);
- ``sparse``: True when its zeros are a chosen pattern (a run that pruned, or whose input was
  sparse), False when they are not (a dense or quantized source, a quantizing or shrinking run of
  one), None when unknown;
- ``detail``: one line for people (``"Q4_K_M GGUF, dequantized"``, ``"wanda 50% (run …)"``);
- ``parent``: the lineage of the model the run started from, when it had one.

A model with no lineage file (a hub checkpoint, a folder saved elsewhere) has ``sparse`` None, and
the zeros are judged by the fraction threshold as before (:data:`toolkit.methods.gptq.SPARSE_INPUT`),
which the summaries say. Torch-free.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

LINEAGE_FILE = "prunelab_lineage.json"


@dataclass(frozen=True)
class Lineage:
    """Where a model comes from, as far as PruneLab knows."""

    origin: str = "unknown"  # "gguf" | "run" | "built" | "unknown"
    sparse: bool | None = None  # its exact zeros are a chosen sparsity pattern (None: unknown, judged by a threshold)
    detail: str = ""
    parent: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)

    def zeros_word(self) -> str:
        """How the zeros were told apart, for the summaries."""
        if self.sparse is None:
            return "no lineage: judged from its zeros"
        return f"lineage: {self.detail or self.origin}"


UNKNOWN = Lineage()
DENSE_BUILT = Lineage(origin="built", sparse=False, detail="built in memory, dense")


def quantized_source(quantization: str) -> Lineage:
    """A model dequantized from a quantized file: its zeros are rounding."""
    return Lineage(origin="gguf", sparse=False, detail=f"{quantization} GGUF, dequantized: its zeros are rounding")


def run_output(parent: Lineage, chose_zeros: bool, detail: str) -> Lineage:
    """The lineage of a model a run wrote: sparse when the run chose zeros or its input's zeros were a pattern."""
    sparse = True if chose_zeros or parent.sparse else (None if parent.sparse is None else False)
    return Lineage(origin="run", sparse=sparse, detail=detail, parent=parent.to_dict())


def read_lineage(folder: str | Path) -> Lineage:
    """The lineage written in ``folder`` (:data:`UNKNOWN` when there is none or it is unreadable)."""
    path = Path(folder) / LINEAGE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, UnicodeDecodeError, ValueError):
        return UNKNOWN
    if not isinstance(data, dict):
        return UNKNOWN
    sparse = data.get("sparse")
    parent = data.get("parent")
    return Lineage(origin=str(data.get("origin", "unknown")), sparse=sparse if isinstance(sparse, bool) else None,
                   detail=str(data.get("detail", "")), parent=parent if isinstance(parent, dict) else None)


def write_lineage(folder: str | Path, lineage: Lineage) -> None:
    """Write ``lineage`` into ``folder`` (beside the weights)."""
    (Path(folder) / LINEAGE_FILE).write_text(json.dumps(lineage.to_dict(), indent=1), encoding="utf-8")
