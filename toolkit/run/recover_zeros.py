"""The zeros of a recovery, measured on the weights: the parent's before training, the recovered model's after.

A recovery's summary claims that the pruned weights stayed 0 and gives the sparsity it achieved.
Both are counted here on the weights themselves, never copied from the parent's record:

- before training (:func:`parent_zeros`), on the parent's saved model: the weights that are exactly
  0, split into those the keep-masks drop (the masked update never touches them) and those the
  keep-masks keep although they are 0 (``kept_zeros``; they train like any kept weight, so they do
  not stay 0). A keep-mask file rewritten to keep pruned weights shows up here;
- after the merge (:func:`measure_zeros`), on the recovered model: how many of the parent's zeros
  are still exactly 0, how many weights the keep-masks drop are not 0 (0 by the masked update,
  :mod:`toolkit.engine.lora`), the zeros and nonzeros of every decoder-layer linear, and
  ``achieved_sparsity = 1 − nonzeros / params_before`` (``params_before``: the parent's linear
  weights before its compression, so units a block-scope run removed count as pruned, as in
  :mod:`toolkit.run.accounting`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from toolkit.models.layers import get_weight

LinearNames = Mapping[nn.Module, tuple[int, str, str]]  # linear → (layer, name, qualified name)


@dataclass
class ParentZeros:
    """The parent's zeros taken before training (see the module docstring)."""

    zeros: int = 0  # weights exactly 0 in the parent's saved model
    dropped: int = 0  # weights the keep-masks drop (all of them 0: toolkit.engine.lora.check_masks)
    kept_zeros: dict[nn.Module, Tensor] = field(default_factory=dict)  # flat indices: kept by the mask, yet 0
    where: dict[nn.Module, tuple[int, str]] = field(default_factory=dict)  # linear → (layer, name)

    @property
    def kept_zero_count(self) -> int:
        """Weights the keep-masks keep although they are exactly 0 in the parent's model."""
        return sum(int(index.numel()) for index in self.kept_zeros.values())


def parent_zeros(linears: LinearNames, keep_masks: Mapping[nn.Module, Tensor]) -> ParentZeros:
    """Count the zeros of the parent's saved model per keep-mask; keep the positions of the kept ones."""
    found = ParentZeros()
    with torch.no_grad():
        for module, (index, name, _) in linears.items():
            weight, keep = get_weight(module), keep_masks[module].to(torch.bool)
            zero = weight == 0
            found.zeros += int(zero.sum())
            found.dropped += int((~keep).sum())
            kept_zero = torch.nonzero((zero & keep).reshape(-1)).reshape(-1)
            if kept_zero.numel():
                found.kept_zeros[module] = kept_zero
            found.where[module] = (index, name)
    return found


def kept_zeros_warning(found: ParentZeros) -> str:
    """The warning before training when keep-masks keep weights that are 0 ("" when none do)."""
    count = found.kept_zero_count
    if not count:
        return ""
    module = max(found.kept_zeros, key=lambda m: found.kept_zeros[m].numel())
    layer, name = found.where[module]
    return (f"the stored keep-masks keep {count:,} weights that are exactly 0 in the saved model (most in layer "
            f"{layer} {name}: {found.kept_zeros[module].numel():,}); the recovery trains every weight a keep-mask "
            "keeps, so these will not stay 0 (if the run pruned them, its mask file was changed after the run)")


def measure_zeros(linears: LinearNames, keep_masks: Mapping[nn.Module, Tensor], before: ParentZeros,
                  params_before: int) -> dict[str, Any]:
    """The recovered model's zeros (result.json ``zeros``), counted on the merged weights of ``linears``."""
    weights = nonzeros = dropped_nonzero = still_zero = 0
    trained: list[dict[str, Any]] = []
    with torch.no_grad():
        for module in linears:
            weight, keep = get_weight(module), keep_masks[module].to(torch.bool)
            zero = weight == 0
            weights += weight.numel()
            nonzeros += int(weight.numel() - int(zero.sum()))
            dropped_nonzero += int((~zero & ~keep).sum())
            still_zero += int((zero & ~keep).sum())
            kept_zero = before.kept_zeros.get(module)
            if kept_zero is not None:
                stayed = int(zero.reshape(-1)[kept_zero].sum())
                still_zero += stayed
                if stayed < kept_zero.numel():
                    layer, name = before.where[module]
                    trained.append({"layer": layer, "name": name, "kept_zeros": int(kept_zero.numel()),
                                    "nonzero_after": int(kept_zero.numel()) - stayed})
    total = max(params_before, weights)
    return {"parent_zeros": before.zeros, "still_zero": still_zero, "dropped": before.dropped,
            "dropped_nonzero": dropped_nonzero, "kept_zeros": before.kept_zero_count,
            "trained": sorted(trained, key=lambda row: -row["nonzero_after"]), "weights": weights,
            "zeros": weights - nonzeros, "nonzeros": nonzeros, "params_before": total,
            "achieved_sparsity": 1.0 - nonzeros / total if total else 0.0}

