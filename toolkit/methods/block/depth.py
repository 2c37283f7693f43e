"""Depth pruning: score whole decoder layers by what they change, remove the ones that change least.

Two scores, both from one calibration pass of the dense model, layer by layer
(:mod:`toolkit.engine.block.depth` accumulates them without keeping the activations):

- **Block influence** (``score=bi``, ShortGPT, Men et al. 2024): for layer l with input x_l and
  output x_{l+1} (the residual stream before and after it),

      BI_l = 1 − E_t[cos(x_l,t, x_{l+1},t)]        (mean over every calibration token t);

  the ``n`` layers with the lowest BI go (they need not be adjacent).
- **Angular distance** of a block of ``n`` consecutive layers (``score=angular``, Gromov et al.,
  "The Unreasonable Ineffectiveness of the Deeper Layers"):

      d(l, n) = E_t[arccos(cos(x_l,t, x_{l+n},t))] / π,   l = 0 … L − n;

  the block l*…l*+n−1 with the smallest d goes. (The paper reads the last token of each sequence;
  here every calibration token counts, as for BI.)

This module holds the choice (pure functions of the scores) and the method's registry entry; the
engine calls :func:`choose_layers`. ``n`` is the count asked for (``structured:4 layers``) or
round(ρ·L) for a fraction ρ (:func:`layer_count`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from toolkit.errors import ToolkitError
from toolkit.methods.base import MethodSpec, Produces, Scope, option
from toolkit.spec.compression import Unit
from toolkit.spec.targets import Structured

SCORES = ("bi", "angular")


@dataclass(frozen=True)
class DepthConfig:
    """Options of ``--method depth``."""

    score: str = option("bi", "which layers go: bi (the n layers of lowest block influence 1 − cos(x_in, x_out), "
                        "ShortGPT) or angular (the n consecutive layers whose input and output are closest in "
                        "angular distance arccos(cos)/π, Gromov et al.)", SCORES)


def layer_count(target: Structured, num_layers: int) -> int:
    """Layers to remove: the count of ``structured:N layers``, or floor(ρ·L + ½) for a fraction ρ.

    >>> layer_count(Structured(0.0, 4), 30), layer_count(Structured(0.25), 30), layer_count(Structured(0.1), 3)
    (4, 8, 0)
    """
    return target.layers if target.layers else math.floor(target.sparsity * num_layers + 0.5)


def check_count(target: Structured, num_layers: int) -> int:
    """The count of layers to remove; raises a one-line :class:`ToolkitError` for none or all of them."""
    count = layer_count(target, num_layers)
    if count <= 0:
        raise ToolkitError(f"{target} removes no layer of a model with {num_layers} decoder layers: "
                           f"ask for at least one, e.g. structured:1 layer or structured:{100 / num_layers:.0f}%")
    if count >= num_layers:
        raise ToolkitError(f"{target} would remove {count} of the model's {num_layers} decoder layers; at most "
                           f"{num_layers - 1} can go (e.g. structured:{max(num_layers // 4, 1)} layers)")
    return count


def block_influence(cos_sums: Tensor, tokens: int) -> Tensor:
    """BI per layer, 1 − (Σ_t cos)/N, from the per-layer sums of the token cosines."""
    return 1.0 - cos_sums.double() / max(tokens, 1)


def choose_layers(score: str, influence: Tensor, angular: Tensor | None, count: int) -> list[int]:
    """Indices of the layers to remove, ascending.

    ``bi``: the ``count`` lowest of ``influence`` (ties: the lower index); ``angular``: the block
    starting at the lowest of ``angular`` (one entry per start l = 0 … L − count).

    >>> choose_layers("bi", torch.tensor([0.3, 0.1, 0.2, 0.05]), None, 2)
    [1, 3]
    >>> choose_layers("angular", torch.tensor([0.3, 0.1, 0.2, 0.05]), torch.tensor([0.4, 0.2, 0.3]), 2)
    [1, 2]
    """
    if score == "angular":
        assert angular is not None and len(angular) == len(influence) - count + 1
        start = int(torch.argmin(angular))
        return list(range(start, start + count))
    order = torch.argsort(influence.double(), stable=True)
    return sorted(int(i) for i in order[:count])


def not_a_scorer(*args: Any, **kwargs: Any) -> Any:
    """The depth method scores whole layers inside the block engine; it has no per-layer scorer to call."""
    raise ToolkitError("depth removes whole decoder layers: run it through toolkit.engine.block.driver.prune_blocks "
                       "(prune --method depth), not the per-linear engine")


SPEC = MethodSpec(name="depth", fn=not_a_scorer, config=DepthConfig, needs=frozenset(), targets=(Structured,),
                  summary="removes whole decoder layers: block influence 1 − cos (ShortGPT) or the closest "
                          "block by angular distance (Gromov et al.)",
                  scope=Scope.BLOCK, produces=frozenset({Produces.STRUCTURE}), units=(Unit.LAYERS,))
