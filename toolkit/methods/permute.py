"""Channel permutation for n:m sparsity (RIA, Zhang et al. ICLR 2024, §channel permutation).

An n:m mask keeps n of every m consecutive inputs of a row. When the important inputs of a linear
sit side by side, one m-group holds more of them than it may keep. Permuting the inputs first
(W_π = W[:, π], an (out, in) matrix whose column k is input π_k) lets the groups be chosen freely:

1. **spread** (the heuristic): sort the inputs by their importance c_j = Σ_i S_ij (descending) and
   deal them round-robin over the K = in/m groups: rank r goes to group r mod K, position r // K;
2. **refine** (the assignment step): for every position p of the groups, take the input at p out
   of each group and put the K inputs back by a maximum-weight assignment, the weight of input i
   in group j being the kept score of group j's rows with i added:
       gain(i, j) = Σ_rows [ top-n(R_j) + max(0, S_·i − t_j) ],   t_j = n-th largest of R_j
   (R_j the group's other m−1 inputs: adding i to them replaces their n-th largest only if larger).
   The current placement is one of the assignments, so a step never lowers the kept sum; sweeps
   over the positions stop when one gains nothing (at most :data:`SWEEPS`). The assignment is exact
   (:func:`assign_max`: most rows matched in whole-matrix steps, the rest by shortest augmenting paths);
   where the optimum is not unique (inputs that swap places without changing any row's kept set, seen
   with few rows) another optimal placement may be returned than by a different exact solver.

The objective is the sum of kept scores Σ S ⊙ keep_nm(S_π); the permutation with the larger sum
of the refined one and the identity is used. :func:`permuted_solve` solves one linear in the
permuted order and maps the result back: the returned weight and keep-mask are in the original
order (the layer computes the same outputs), and the mask is n:m in the permuted order
(``keep_mask[:, π]``), which ``info["permutation"]`` records.

The score S that is spread: magnitude |W| for ``magnitude``, the RIA score for ``ria``, and the Wanda
score |W_ij|·‖X_j‖ for every other method (Wanda's own; for the solvers with an update it is the
diagonal approximation of the OBS saliency W_ij²/[H⁻¹]_jj ≈ W_ij²·H_jj).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch import Tensor

from toolkit.methods.base import LinearStats, MethodSpec, PruneResult, SolveContext
from toolkit.methods.masks import keep_nm
from toolkit.methods.ria import ria_scores
from toolkit.methods.wanda import wanda_scores
from toolkit.spec.targets import NM

PATIENCE = 128  # steps of the row reduction without fewer free rows before the rest go to the Dijkstra search
SWEEPS = 1  # refinement sweeps over the m positions (each is m assignments); a second adds < 0.1 % (measured)


def kept_score(scores: Tensor, target: NM) -> float:
    """Σ of the scores an n:m mask keeps in this column order; ``scores`` (out, in) ≥ 0."""
    return float((scores * keep_nm(scores, target)).sum())


def spread(importance: Tensor, m: int) -> Tensor:
    """The round-robin permutation (in,): the r-th most important input to group r mod K, position r // K."""
    order = torch.argsort(importance, descending=True, stable=True)  # (in,)
    groups = importance.numel() // m
    return order.reshape(m, groups).t().reshape(-1)  # (K, m) → position k·m + p holds rank p·K + k


def _gains(scores: Tensor, blocks: Tensor, position: int, n: int) -> Tensor:
    """The gain (K, K) float64: kept score of group j (its inputs but the one at ``position``) with input i added.

    Σ_r max(0, c_r − t_r) = ½ (Σ_r c_r − Σ_r t_r + Σ_r |c_r − t_r|): one L1 distance matrix (``cdist``) for all
    pairs instead of a (K, rows, K) temporary.
    """
    keep = [p for p in range(blocks.shape[1]) if p != position]
    rest = scores[:, blocks[:, keep]].double()  # (out, K, m-1)
    top = torch.topk(rest, n, dim=2).values  # (out, K, n)
    base, nth = top.sum(dim=(0, 2)), top[:, :, -1].t().contiguous()  # (K,), (K, out): t_j per row
    free = scores[:, blocks[:, position]].double().t().contiguous()  # (K, out): row i is the input out of group i
    added = 0.5 * (free.sum(1, keepdim=True) - nth.sum(1).unsqueeze(0) + torch.cdist(free, nth, p=1))  # (K, K)
    return added.clamp_min_(0.0) + base.unsqueeze(0)


def assign_max(gain: np.ndarray) -> np.ndarray:
    """The column of every row of the square ``gain`` matrix in a maximum-weight perfect assignment.

    The Hungarian method (shortest augmenting paths with potentials u, v, O(K³)): ``gain`` (K, K) float64;
    returns ``col`` (K,) int with Σ_i gain[i, col[i]] maximal. Row and column reductions first match each
    row to a free column of zero reduced cost where one is left; :func:`_reduce_rows` then matches most of
    the others in whole-matrix steps; every row still free is added by a Dijkstra search over the columns,
    one vectorised step per column reached, with the potentials' changes kept as the distance at which
    each column was reached and applied once at the end of the search. Every phase keeps the reduced
    costs ≥ 0 and the matched ones 0, so the result is optimal (the same assignment whenever the optimum
    is unique).
    """
    size = gain.shape[0]
    cost = gain.max() - gain  # minimise, all ≥ 0
    v = cost.min(axis=0)  # (K,) column potentials
    u = (cost - v).min(axis=1)  # (K,) row potentials: every reduced cost cost − u − v ≥ 0
    owner = np.full(size, -1, dtype=np.int64)  # owner[j]: the row assigned to column j (-1: none)
    tight = (cost - v - u[:, None]) <= 0.0  # (K, K): the argmin of each row is exactly 0
    for row in range(size):
        cols = np.flatnonzero(tight[row] & (owner < 0))
        if cols.size:
            owner[cols[0]] = row
    _reduce_rows(cost, u, v, owner)
    matched = np.zeros(size, dtype=bool)
    matched[owner[owner >= 0]] = True
    for row in np.flatnonzero(~matched):
        _augment(cost, u, v, owner, int(row))
    col_of_row = np.empty(size, dtype=np.int64)
    col_of_row[owner] = np.arange(size)
    return col_of_row


def _reduce_rows(cost: np.ndarray, u: np.ndarray, v: np.ndarray, owner: np.ndarray, rounds: int = 0) -> None:
    """Match free rows by augmenting row reduction, all free rows at once; updates u, v, owner in place.

    Jonker and Volgenant's reduction, one step for every free row together: row i finds its two
    smallest reduced costs c_ij − v_j (a₁ at column j₁, a₂); the row with the largest a₂ − a₁ among
    those that chose j₁ takes it, v_j₁ falls by a₂ − a₁ and u_i = a₂, so its edge is tight and every
    reduced cost stays ≥ 0 (v only falls); j₁'s former row is free again. A row whose two smallest are
    equal takes j₂ when that column is free. Stops after ``rounds`` steps (default 2K) or when a step
    leaves no fewer rows free than the step before; the rest are left to :func:`_augment`.
    """
    size = cost.shape[0]
    row_of = np.full(size, -1, dtype=np.int64)  # (K,): the column of each row (-1: free)
    row_of[owner[owner >= 0]] = np.flatnonzero(owner >= 0)
    free = np.flatnonzero(row_of < 0)
    fewest, stalled = free.size, 0
    for _ in range(rounds or 2 * size):
        if free.size == 0:
            break
        reduced = cost[free] - v  # (F, K)
        first = reduced.argmin(axis=1)  # (F,) j₁
        lowest = reduced[np.arange(free.size), first]  # (F,) a₁
        reduced[np.arange(free.size), first] = np.inf
        second = reduced.argmin(axis=1)  # (F,) j₂
        drop = reduced[np.arange(free.size), second] - lowest  # (F,) a₂ − a₁ ≥ 0
        column = np.where((drop <= 0.0) & (owner[second] < 0), second, first)
        order = np.lexsort((-drop, column))  # by column, the largest drop first
        winners = order[np.r_[True, column[order][1:] != column[order][:-1]]]  # (W,): one row per column
        cols, rows = column[winners], free[winners]
        evicted = owner[cols]
        v[cols] -= np.where(cols == first[winners], drop[winners], 0.0)
        u[rows] = cost[rows, cols] - v[cols]
        row_of[evicted[evicted >= 0]] = -1
        owner[cols], row_of[rows] = rows, cols
        left = np.flatnonzero(row_of < 0)
        stalled = stalled + 1 if left.size >= fewest else 0
        fewest = min(fewest, left.size)
        free = left
        if stalled >= PATIENCE:
            break
    free = np.flatnonzero(row_of < 0)
    u[free] = (cost[free] - v).min(axis=1)  # feasible again for the rows left to the Dijkstra search


def _augment(cost: np.ndarray, u: np.ndarray, v: np.ndarray, owner: np.ndarray, row: int) -> None:
    """Add ``row`` to the assignment ``owner`` along a shortest augmenting path; updates u, v, owner in place.

    ``dist[j]`` is the length of the shortest alternating path from ``row`` to column j found so far;
    columns are reached in increasing distance (``reached_at``), and at the end the potentials move by
    (final distance − distance when reached), which keeps every reduced cost ≥ 0 and the path tight.
    """
    size = cost.shape[0]
    dist = np.full(size, np.inf)
    way = np.full(size, -1, dtype=np.int64)  # the column before j on its path (-1: the new row itself)
    blocked = np.zeros(size)  # +inf once a column is reached
    reached, reached_at = [], []
    here, col, length = row, -1, 0.0
    while True:
        candidate = cost[here] - u[here] - v + length + blocked  # (K,)
        better = candidate < dist
        way[better] = col
        np.minimum(dist, candidate, out=dist)
        col = int(np.argmin(dist))
        length = float(dist[col])
        reached.append(col)
        reached_at.append(length)
        dist[col], blocked[col] = np.inf, np.inf
        if owner[col] < 0:
            break
        here = int(owner[col])
    cols = np.array(reached[:-1], dtype=np.int64)
    shift = length - np.array(reached_at[:-1])
    u[row] += length
    u[owner[cols]] += shift
    v[cols] -= shift
    while col >= 0:  # flip the path
        prev = int(way[col])
        owner[col] = owner[prev] if prev >= 0 else row
        col = prev


def refine(scores: Tensor, perm: Tensor, target: NM, sweeps: int = SWEEPS) -> Tensor:
    """``perm`` improved by assignment steps (module docstring, step 2); never a lower kept score."""
    blocks = perm.reshape(-1, target.m).clone()  # (K, m)
    best = kept_score(scores[:, perm], target)
    for _ in range(sweeps):
        start = best
        for position in range(target.m):
            gain = _gains(scores, blocks, position, target.n)
            to_group = torch.from_numpy(assign_max(gain.cpu().numpy())).to(blocks.device)  # input i → group
            placed = blocks[:, position].clone()
            blocks[to_group, position] = placed
        best = kept_score(scores[:, blocks.reshape(-1)], target)
        if best <= start * (1 + 1e-9):
            break
    return blocks.reshape(-1)


def find_permutation(scores: Tensor, target: NM, sweeps: int = SWEEPS) -> tuple[Tensor, dict[str, float]]:
    """The input permutation π (in,) int64 for ``scores`` (out, in) ≥ 0, and the kept sums it gives.

    Returns ``(perm, info)`` with ``info = {"kept_identity", "kept_permuted"}``: Σ of kept scores
    without and with π. π is the identity when the refined permutation keeps less.
    """
    width = scores.shape[1]
    assert width % target.m == 0, f"{width} inputs are not a whole number of groups of {target.m}"
    identity = torch.arange(width, device=scores.device)
    perm = refine(scores, spread(scores.sum(0), target.m), target, sweeps)
    kept_identity, kept = kept_score(scores, target), kept_score(scores[:, perm], target)
    if kept < kept_identity:
        perm, kept = identity, kept_identity
    return perm, {"kept_identity": kept_identity, "kept_permuted": kept}


def permutation_scores(spec: MethodSpec, W: Tensor, stats: LinearStats, cfg: Any) -> Tensor:
    """The score (out, in) whose kept sum the permutation maximises (module docstring, last paragraph)."""
    if spec.name == "magnitude":
        return W.abs()
    if spec.name == "ria":
        return ria_scores(W, stats, float(cfg.power))
    return wanda_scores(W, stats)


def permute_stats(stats: LinearStats, perm: Tensor) -> LinearStats:
    """The statistics of the inputs reordered by ``perm``: vectors and sample columns, Gram rows and columns."""

    def square(G: Tensor | None) -> Tensor | None:
        return None if G is None or G.numel() == 0 else G[perm][:, perm]

    return dataclasses.replace(
        stats,
        gram=stats.gram if stats.gram.numel() == 0 else stats.gram[perm][:, perm],
        cross=square(stats.cross), dense_gram=square(stats.dense_gram),
        col_sq=None if stats.col_sq is None else stats.col_sq[perm],
        sample=None if stats.sample is None else stats.sample[:, perm],  # (T, in)
        col_mean=None if stats.col_mean is None else stats.col_mean[perm],
    )


def permuted_solve(
    spec: MethodSpec, W: Tensor, stats: LinearStats, target: NM, cfg: Any, ctx: SolveContext
) -> PruneResult:
    """Solve one linear on permuted inputs and map the result back to the original input order.

    ``W`` (out, in) float32 is not mutated. The result's weight and keep-mask are in the original
    order; ``keep_mask[:, π]`` is n:m wherever the method's own mask is (Thanos with α > 0 keeps its
    outlier rows dense in any order). ``info`` gets ``permutation`` (π as a list: column
    k of the permuted layer is input π_k) and the kept score sums with and without it.
    """
    assert isinstance(target, NM), "--permute needs an n:m target (checked by the spec)"
    perm, sums = find_permutation(permutation_scores(spec, W, stats, cfg), target)
    ctx.check_cancel()
    inverse = torch.argsort(perm)
    result = spec.fn(W[:, perm].contiguous(), permute_stats(stats, perm), target, cfg, ctx)
    assert result.quant is None, "--permute is refused with --quant (the grid's groups follow the inputs)"
    keep = result.keep_mask[:, inverse]
    info = {**result.info, "permutation": perm.tolist(), "permute_kept_identity": sums["kept_identity"],
            "permute_kept": sums["kept_permuted"]}
    return dataclasses.replace(result, weight=result.weight[:, inverse], keep_mask=keep, info=info)
