"""A run and its model's lineage: the zeros of its input told apart, the lineage of what it saves.

:mod:`toolkit.models.lineage` says where a model's exact zeros come from. A run reads it twice:
before the compression, to resolve GPTQ's ``keep_zeros=auto`` (:func:`held_zeros`), and when it
saves its model, to write the new model's lineage (:func:`output_lineage`): sparse when the run
chose zeros (a linear-scope run with a sparsity target) or its input was sparse.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from toolkit.methods import MethodSpec
from toolkit.methods.base import Scope
from toolkit.models.lineage import Lineage, run_output
from toolkit.models.load import LoadedModel
from toolkit.run.config import RunConfig


def held_zeros(method_cfg: Any, loaded: LoadedModel) -> Any:
    """``keep_zeros=auto`` (GPTQ) resolved by the model's lineage.

    On for a pruned model, off for a dense or quantized source (its zeros are rounding, not a
    pattern); left to the zero-fraction threshold when the lineage is unknown.
    """
    if getattr(method_cfg, "keep_zeros", None) != "auto" or loaded.lineage.sparse is None:
        return method_cfg
    return dataclasses.replace(method_cfg, keep_zeros="on" if loaded.lineage.sparse else "off")


def output_lineage(parent: Lineage, config: RunConfig, spec: MethodSpec, run_id: str) -> Lineage:
    """The lineage of the model run ``run_id`` saves from a model of lineage ``parent``."""
    chose = config.sparsity is not None and spec.scope is Scope.LINEAR
    return run_output(parent, chose_zeros=chose, detail=f"{spec.name} {config.compression.label} (run {run_id})")
