"""Statistics accumulators and the hooks that feed them (CONTRIBUTING.md R2: statistics live in the engine).

For one group of linears that share an input (e.g. q, k, v) the engine keeps one
:class:`GroupStats`; every linear of the group receives the same :class:`LinearStats`:

- ``gram``        G* = Σ_t x*_t x*_tᵀ / N    inputs on the pruned path
- ``cross``       C  = Σ_t x*_t x_tᵀ / N     pruned-path input against the dense-layer input
- ``dense_gram``  G  = Σ_t x_t x_tᵀ / N      dense-layer inputs
- ``col_mean``    μ  = Σ_t x*_t / N          the inputs' mean per column (mask refinement)

All in float32 (``SOLVER_DTYPE``), means over the N tokens seen.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn

from toolkit.errors import NumericalError
from toolkit.methods.base import SOLVER_DTYPE, LinearStats
from toolkit.runtime.precision import full_precision


class StopForward(Exception):
    """Raised by a hook to end a forward pass early once the needed inputs were captured."""


class GroupStats:
    """Running sums of the Gram matrices of one group's input (see the module docstring).

    ``gram_limit`` (tokens) is for methods that need only column norms (``Stat.COL_NORMS``) or
    nothing: the column norms then cover every token, while the reconstruction error is measured on
    the inputs of the first ``gram_limit`` tokens, kept as a sample S (``LinearStats.sample``,
    SᵀS = G*); no (in, in) Gram is built, which saves its O(N · in²) cost and its memory.
    """

    def __init__(self, width: int, device: torch.device, cross: bool, gram_limit: int | None = None) -> None:
        if cross and gram_limit is not None:
            raise ValueError("a sampled Gram cannot be combined with cross statistics")
        self.count = 0
        self.gram_count = 0
        self.gram_limit = gram_limit
        sampled = gram_limit is not None
        self.gram = torch.zeros(0 if sampled else width, 0 if sampled else width, dtype=SOLVER_DTYPE, device=device)
        self.rows: list[Tensor] = []  # the sampled tokens' inputs (sampled statistics: no Gram is built)
        self.col_sq = torch.zeros(width, dtype=SOLVER_DTYPE, device=device) if sampled else None
        self.col_sum = torch.zeros(width, dtype=SOLVER_DTYPE, device=device)
        self.cross = torch.zeros(width, width, dtype=SOLVER_DTYPE, device=device) if cross else None
        self.dense_gram = torch.zeros_like(self.cross) if self.cross is not None else None

    def add(self, x_pruned: Tensor, x_dense: Tensor | None = None) -> None:
        """Accumulate one batch: ``x_*`` are (..., in) activations of the same tokens (float32 sums, never autocast)."""
        with full_precision(self.gram.device):
            self._add(x_pruned, x_dense)

    def _add(self, x_pruned: Tensor, x_dense: Tensor | None) -> None:
        xp = _flat(x_pruned)
        self.count += xp.shape[0]
        self.col_sum += xp.sum(dim=0)
        if self.gram_limit is not None:
            assert self.col_sq is not None
            self.col_sq += torch.linalg.vector_norm(xp, dim=0).square()
            xp = xp[: max(self.gram_limit - self.gram_count, 0)]
            if xp.shape[0]:
                self.rows.append(xp.clone())
        else:
            add_gram_upper_(self.gram, xp)
        self.gram_count += xp.shape[0]
        if self.cross is not None:
            assert x_dense is not None and self.dense_gram is not None
            xd = _flat(x_dense)
            self.cross.addmm_(xp.t(), xd)
            add_gram_upper_(self.dense_gram, xd)

    def finish(self, where: str) -> LinearStats:
        """Means over the tokens; raises :class:`NumericalError` on non-finite activations."""
        if self.count == 0 or self.gram_count == 0:
            raise NumericalError(f"{where}: no calibration tokens reached this linear")
        scale = 1.0 / self.count
        sampled = self.gram_count < self.count
        sample = torch.cat(self.rows).mul_(self.gram_count ** -0.5) if self.gram_limit is not None else None
        self.rows = []
        stats = LinearStats(
            gram=self.gram if sample is not None else symmetrize_(self.gram).div_(self.gram_count),
            sample=sample,
            count=self.count,
            cross=None if self.cross is None else self.cross * scale,
            dense_gram=None if self.dense_gram is None else symmetrize_(self.dense_gram).mul_(scale),
            col_sq=None if self.col_sq is None else self.col_sq * scale,
            gram_count=self.gram_count if sampled else None,
            col_mean=self.col_sum * scale,
        )
        finite = (torch.isfinite(stats.gram).all() and (stats.col_sq is None or torch.isfinite(stats.col_sq).all())
                  and (stats.sample is None or torch.isfinite(stats.sample).all()))
        if not finite:
            raise NumericalError(
                f"{where}: non-finite (NaN/Inf) activations in the calibration statistics; "
                "check the model weights (try --device cpu or a float32 checkpoint)"
            )
        return stats


GRAM_PANEL = 192  # columns per panel of the upper-triangular Gram update (measured fastest on CPU)


def add_gram_upper_(G: Tensor, x: Tensor, panel: int = GRAM_PANEL) -> None:
    """G[a, a:] += x[:, a]ᵀ x[:, a:] for panels a of columns: the upper triangle of G += xᵀx.

    The Gram matrix is symmetric, so only the panels on and right of the diagonal are computed
    (about 2/3 of the flops of a full ``xᵀx`` for 1536 inputs); :func:`symmetrize_` mirrors them.
    """
    width = x.shape[1]
    for start in range(0, width, panel):
        stop = min(start + panel, width)
        G[start:stop, start:].addmm_(x[:, start:stop].t(), x[:, start:])


def symmetrize_(G: Tensor) -> Tensor:
    """The full symmetric matrix from its upper triangle, in place (one (in, in) temporary); returns ``G``."""
    strict = torch.triu(G, 1)
    return G.triu_().add_(strict.t())


def _flat(x: Tensor) -> Tensor:
    return x.reshape(-1, x.shape[-1]).to(SOLVER_DTYPE)


@contextlib.contextmanager
def capture_inputs(
    modules: dict[str, nn.Module], sink: Callable[[str, Tensor], None], stop_after: set[str] | None = None
) -> Iterator[None]:
    """Call ``sink(name, input)`` whenever a module runs.

    Raises :class:`StopForward` once every module in ``stop_after`` has run (early exit). Hooks are removed
    on exit.
    """
    seen: set[str] = set()

    def make_hook(name: str) -> Callable:
        def hook(module: nn.Module, args: tuple) -> None:
            sink(name, args[0].detach())
            seen.add(name)
            if stop_after is not None and stop_after <= seen:
                raise StopForward

        return hook

    handles = [module.register_forward_pre_hook(make_hook(name)) for name, module in modules.items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def discover_groups(
    layer: nn.Module, linears: dict[str, nn.Module], run_layer: Callable[[], object]
) -> list[list[str]]:
    """Groups of linears fed the very same input tensor, in call order (one probe forward).

    Linears that never run in the probe are left out (the caller warns about them).
    """
    order: list[tuple[str, Tensor]] = []
    with capture_inputs(linears, lambda name, x: order.append((name, x))):
        run_layer()
    groups: list[list[str]] = []
    keys: list[Tensor] = []
    for name, x in order:
        if any(name in g for g in groups):
            continue
        for key, group in zip(keys, groups, strict=True):
            if key is x or (key.data_ptr() == x.data_ptr() and key.shape == x.shape):
                group.append(name)
                break
        else:
            keys.append(x)
            groups.append([name])
    return groups
