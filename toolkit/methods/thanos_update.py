"""Thanos kernels: the multi-weight OBS update, the global residual mask, outlier rows, columns.

Tensor-only helpers for :mod:`toolkit.methods.thanos` (see its docstring for the algorithm and
the paper's equation numbers). Shapes: ``rows`` = output features, ``B`` = columns of the current
block, ``f`` = free columns F = {j1, …, in−1} (the block first), all float32 unless stated.

Multi-weight update (paper eqs. 6–10, 51–61). For one row w restricted to F and the indices
q = (q_1 < … < q_s) to remove (all inside the block), with R = rows q of (Ĥ_FF)⁻¹:

    R̂ = R[:, q]  (s, s),   u = w[q]  (1, s),   λ̂ R̂ = u  (57),   δ̂ = −λ̂ R  (10)

so δ̂[q] = −u (the removed weights become exactly 0) and the row's objective grows by
δ̂ Ĥ_FF δ̂ᵀ = u R̂⁻¹ uᵀ = λ̂ · u. All rows are solved together: each row's q is padded to a common
length r with R̂' = [[R̂, 0], [0, I]] and u' = (u, 0) (eqs. 77–79), so the padded λ̂' entries are 0.
Rows are batched as tensors (sorted by size, in chunks); there is no Python loop over rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from toolkit.errors import NumericalError

ROW_CHUNK = 128  # rows per batched solve: bounds memory (paper H.2 "vertical blocks") and padding
SELECT_SAMPLE = 32768  # sample size of the threshold search in :func:`kth_smallest`
SELECT_SEED = 0  # the sample's positions are pseudo-random but fixed (the result never depends on them)


def ceil_count(value: float) -> int:
    """⌈value⌉ robust to float noise: 0.1·30 = 3.0000000000000004 counts as 3, not 4."""
    return math.ceil(round(value, 9))


def removal_positions(prune: Tensor) -> tuple[Tensor, Tensor]:
    """φ of every row (eq. 75), padded: positions of the True entries of ``prune``, ascending.

    ``prune`` (rows, B) bool. Returns ``positions`` (rows, r) int64 and ``valid`` (rows, r) bool
    with r = max_i s_i; padded slots hold some position but are marked invalid.
    """
    rows, B = prune.shape
    counts = prune.sum(1)  # (rows,)
    width = int(counts.max()) if prune.numel() else 0
    rank = torch.cumsum(prune, 1) - 1  # (rows, B): slot of each pruned position
    slot = torch.where(prune, rank, width)  # the others go to a spare slot, dropped below
    columns = torch.arange(B, device=prune.device).expand(rows, B)
    positions = torch.zeros(rows, width + 1, dtype=torch.int64, device=prune.device)
    positions = positions.scatter_(1, slot, columns)[:, :width]  # (rows, r), ascending per row
    valid = torch.arange(width, device=prune.device).unsqueeze(0) < counts.unsqueeze(1)
    return positions, valid


def _solve_padded(G: Tensor, rhs: Tensor, select: Tensor) -> Tensor:
    """x_T = G[T, T]⁻¹ rhs_T for every row's own index set T, padded per eqs. (77)–(79).

    ``G`` (B, B) symmetric positive definite; ``rhs`` (n, B); ``select`` (n, B) bool = T with at
    least one True per row. Returns x (n, B), zero outside T. Raises :class:`NumericalError` if
    a system is singular in float32 (LU, as the official code's ``torch.linalg.solve``).
    """
    positions, valid = removal_positions(select)  # (n, r), (n, r)
    n, width = positions.shape
    rows_T = torch.index_select(G, 0, positions.reshape(-1)).view(n, width, -1)  # (n, r, B)
    G_T = torch.gather(rows_T, 2, positions.unsqueeze(1).expand(n, width, width))  # (n, r, r)
    mask = valid.to(G.dtype)  # (n, r)
    G_T.mul_(mask.unsqueeze(2)).mul_(mask.unsqueeze(1))  # zero the padded rows and columns
    G_T.diagonal(dim1=1, dim2=2).add_(1.0 - mask)  # identity on padded slots (eq. 78)
    b = torch.gather(rhs, 1, positions) * mask  # (n, r), zero on padded slots (eq. 77)
    # G_T is symmetric, so its transpose view is the same matrix in LAPACK's column-major layout
    x, info = torch.linalg.solve_ex(G_T.mT, b.unsqueeze(2))
    if bool(info.any()):
        raise NumericalError("a Thanos row system is singular; increase damp_frac (e.g. 0.1) or nsamples")
    x = x.squeeze(2) * mask  # (n, r)
    return torch.zeros_like(rhs).scatter_add_(1, positions, x)  # (n, B)


def restricted_solve(G: Tensor, rhs: Tensor, select: Tensor) -> Tensor:
    """Per-row solves G[T_i, T_i] x_i = rhs_i[T_i] (T_i = ``select[i]``), batched; x (n, B).

    Rows are sorted by |T_i| and solved in chunks of :data:`ROW_CHUNK`, each padded to its own
    largest |T_i| (less padding than one global r_max, bounded memory); empty rows give 0.
    """
    counts = select.sum(1)  # (n,)
    order = torch.argsort(counts, stable=True)
    active = order[counts[order] > 0]
    out = torch.zeros_like(rhs)
    for start in range(0, active.numel(), ROW_CHUNK):
        chunk = active[start : start + ROW_CHUNK]
        x = _solve_padded(G, rhs.index_select(0, chunk), select.index_select(0, chunk))
        out.index_copy_(0, chunk, x)
    return out


def multiweight_update(w_block: Tensor, U_block: Tensor, U_rows: Tensor, prune: Tensor) -> tuple[Tensor, Tensor]:
    """Eq. (10) for every row at once: ``delta`` = −F U_rows with F, ``loss`` from :func:`multiweight_factor`."""
    factor, loss = multiweight_factor(w_block, U_block, prune)
    return -(factor @ U_rows), loss


def multiweight_factor(w_block: Tensor, U_block: Tensor, prune: Tensor) -> tuple[Tensor, Tensor]:
    """Eq. (10) for every row at once, up to the last product: remove the ``prune`` weights jointly.

    Args:
        w_block: (rows, B) current weights of the block columns.
        U_block: (B, B) upper-triangular U[j1:j2, j1:j2] of Uᵀ U = Ĥ⁻¹. With U_rows = U[j1:j2, j1:]
            (B, f), (Ĥ_FF)⁻¹[block, :] = U_blockᵀ U_rows (notes §1.10), and R̂ of a row is Hb[q, q]
            with Hb = (Ĥ_FF)⁻¹[block, block] = U_blockᵀ U_block.
        prune: (rows, B) bool, True = remove (the local block mask M).

    Returns:
        ``factor`` F = λ̂ U_blockᵀ (rows, B), so that the change of the free weights (rows, f) is
        δ̂ = −λ̂ R = −F U_rows (it sets the pruned weights to 0 up to rounding; the sweep adds it
        in place with one ``addmm_``, no (rows, f) temporary), and ``loss`` (rows,), each row's
        objective increase u R̂⁻¹ uᵀ = λ̂·u in the units of Ĥ.

    A row with s > B/2 solves the smaller system on its kept block columns K instead [OURS]:
    with P = Hb⁻¹ = U_block⁻¹ U_block⁻ᵀ, R̂⁻¹ = P_qq − P_qK P_KK⁻¹ P_Kq (a block of an inverse),
    so λ̂ = t_q − (P z)_q with t = P ũ (ũ = u scattered on the block) and P_KK z = t_K.
    Each row costs O(min(s, B − s)³).

    """
    width = prune.shape[1]
    Hb = U_block.T @ U_block  # (B, B)
    counts = prune.sum(1)  # (rows,)
    direct = 2 * counts <= width  # (rows,)
    lam = torch.zeros_like(w_block)  # (rows, B), λ̂ scattered on q
    rows = torch.nonzero(direct).flatten()
    lam.index_copy_(0, rows, restricted_solve(Hb, w_block.index_select(0, rows), prune.index_select(0, rows)))
    rows = torch.nonzero(~direct).flatten()
    if rows.numel():
        eye = torch.eye(width, dtype=U_block.dtype, device=U_block.device)
        V = torch.linalg.solve_triangular(U_block, eye, upper=True)  # U_block⁻¹
        P = V @ V.T  # (B, B) = Hb⁻¹, the Schur complement of Ĥ_FF onto the block
        drop = prune.index_select(0, rows)  # (n_c, B) = q per row
        t = (w_block.index_select(0, rows) * drop) @ P  # (n_c, B) = P ũ
        z = restricted_solve(P, t, ~drop)  # (n_c, B), P_KK z = t_K, zero outside K
        lam.index_copy_(0, rows, (t - z @ P) * drop)
    return lam @ U_block.T, (lam * w_block).sum(1)


@dataclass(frozen=True)
class SelectScratch:
    """Flat bool buffers the residual mask reuses every block (``size`` entries each).

    A fresh (rows, f) comparison result per block is a new multi-MiB allocation, page-faulted and zero-filled
    again each time (glibc maps large blocks afresh); the sweep allocates these once per linear instead.
    """

    below: Tensor
    band: Tensor

    @classmethod
    def of_size(cls, size: int, device: torch.device) -> SelectScratch:
        """Two uninitialised bool buffers of ``size`` entries on ``device``."""
        return cls(*(torch.empty(size, dtype=torch.bool, device=device) for _ in range(2)))

    @classmethod
    def fitting(cls, scratch: SelectScratch | None, size: int, device: torch.device) -> SelectScratch:
        """``scratch`` if it holds ``size`` entries, else new buffers of that size."""
        if scratch is not None and scratch.below.numel() >= size:
            return scratch
        return cls.of_size(size, device)

    def views(self, size: int) -> tuple[Tensor, Tensor]:
        """The first ``size`` entries of both buffers."""
        return self.below[:size], self.band[:size]


@dataclass(frozen=True)
class Selected:
    """The k-th smallest value t of a flat tensor and how many values lie below it (``n_lt``) and at most at it."""

    value: Tensor
    n_lt: int
    n_le: int


def _count_around(values: Tensor, threshold: Tensor, scratch: SelectScratch) -> Selected:
    """``Selected`` for a known threshold by two comparison passes over ``values`` (into the scratch)."""
    below, band = scratch.views(values.numel())
    n_lt = int(torch.count_nonzero(torch.lt(values, threshold, out=below)))
    n_le = int(torch.count_nonzero(torch.le(values, threshold, out=band)))
    return Selected(threshold, n_lt, n_le)


def kth_select(values: Tensor, k: int, scratch: SelectScratch | None = None) -> Selected:
    """The k-th smallest (1-based) of a flat tensor, exactly ``torch.kthvalue(values, k).values``, with its counts.

    Floyd–Rivest style: a sample of :data:`SELECT_SAMPLE` values at fixed pseudo-random positions
    brackets the answer in [lo, hi]; one comparison pass counts what lies below lo and ``kthvalue``
    runs on the band only (a few percent of the values), which also gives the counts below and at the
    answer without another pass over all values. The positions are random rather than strided because a
    stride that divides the row width samples a few columns only, whose scores need not bracket the
    whole matrix's. Falls back to the full ``kthvalue`` if the bracket misses.
    """
    total = values.numel()
    scratch = SelectScratch.fitting(scratch, total, values.device)
    if total <= SELECT_SAMPLE * 8:
        return _count_around(values, torch.kthvalue(values, k).values, scratch)
    generator = torch.Generator().manual_seed(SELECT_SEED)
    positions = torch.randint(total, (SELECT_SAMPLE,), generator=generator).to(values.device)
    sample = torch.sort(values[positions]).values
    size = sample.numel()
    centre, margin = k / total * size, 4.0 * size**0.5 + 8.0
    low_index, high_index = int(centre - margin), int(centre + margin)
    below_low, in_band = scratch.views(total)
    below = 0
    if low_index > 0:
        torch.lt(values, sample[low_index], out=below_low)
        below = int(torch.count_nonzero(below_low))  # a count, not a sum: summing bools widens them to int64
        torch.logical_not(below_low, out=below_low)  # now: at least lo
    else:
        below_low.fill_(True)
    if high_index < size - 1:
        torch.le(values, sample[high_index], out=in_band).logical_and_(below_low)
    else:
        in_band.copy_(below_low)
    band = values[in_band]
    if below < k <= below + band.numel():
        threshold = torch.kthvalue(band, k - below).values
        return Selected(threshold, below + int(torch.count_nonzero(band < threshold)),
                        below + int(torch.count_nonzero(band <= threshold)))
    return _count_around(values, torch.kthvalue(values, k).values, scratch)


def kth_smallest(values: Tensor, k: int) -> Tensor:
    """The k-th smallest (1-based) of a flat tensor; exact, = ``torch.kthvalue(values, k).values``.

    Small tensors go to ``kthvalue`` directly; larger ones through the sampled band of :func:`kth_select`.
    """
    if values.numel() <= SELECT_SAMPLE * 8:
        return torch.kthvalue(values, k).values
    return kth_select(values, k).value


def residual_block_mask(metric: Tensor, count: int, width: int, scratch: SelectScratch | None = None) -> Tensor:
    """ψ_X(Ŵ, r) restricted to the first ``width`` columns (eqs. 69–70).

    ``metric`` (rows, f) contiguous scores of the free weights (|W_ij|·‖X_j‖ on the current weights;
    +inf excludes a weight); the ``count`` smallest over the whole matrix form the global
    residual mask, and its first ``width`` columns the local block mask (rows, width) bool.
    Ties at the threshold are taken in row-major order (the paper leaves ties open). When exactly
    ``count`` scores are ≤ the threshold (no surplus ties, the usual case) the mask is ``metric ≤
    threshold`` on the block's columns alone; a surplus of ties needs the positions of all ties, in
    row-major order (one comparison pass and ``nonzero`` of the few ties). ``scratch`` (at least
    rows·f entries) is reused rather than allocating the comparisons afresh.
    """
    total = metric.numel()
    if count <= 0:
        return torch.zeros_like(metric[:, :width], dtype=torch.bool)
    if count >= total:
        return torch.ones_like(metric[:, :width], dtype=torch.bool)
    scratch = SelectScratch.fitting(scratch, total, metric.device)
    chosen = kth_select(metric.view(-1), count, scratch)
    block = metric[:, :width]
    if chosen.n_le == count:
        return block <= chosen.value
    mask = block < chosen.value
    ties = torch.eq(metric.view(-1), chosen.value, out=scratch.views(total)[1])
    taken = torch.nonzero(ties.view_as(metric))[: count - chosen.n_lt]  # (need, 2), row-major: the first ties
    taken = taken[taken[:, 1] < width]
    mask[taken[:, 0], taken[:, 1]] = True
    return mask


def row_scores(W: Tensor, H: Tensor, kind: str) -> Tensor:
    """Row loss h_i (rows,).

    ``"full"`` = ‖W_i X‖²/N = (W H Wᵀ)_ii (paper eq. 14);
    ``"diag"`` = Σ_j W_ij² H_jj (the official code's diagonal approximation).
    """
    if kind == "full":
        return ((W @ H) * W).sum(1)
    return (W**2) @ torch.diagonal(H)


def outlier_rows(scores: Tensor, alpha: float) -> Tensor:
    """Indices (ascending) of the ⌈α·rows⌉ rows with the largest ``scores`` (paper §4.7.1)."""
    count = min(ceil_count(alpha * scores.numel()), scores.numel())
    if count == 0:
        return torch.zeros(0, dtype=torch.int64, device=scores.device)
    return torch.sort(torch.topk(scores, count).indices).values


def structured_update(W_rows: Tensor, U: Tensor, removed: int) -> tuple[Tensor, Tensor]:
    """Closed-form removal of the first ``removed`` columns of every row (eq. 13 / 72).

    ``W_rows`` (n, in) with the columns permuted so that the removed set S comes first, and
    ``U`` (in, in) upper-triangular with Uᵀ U = Ĥ⁻¹ of the same permuted Hessian. Since
    Ĥ⁻¹[S, :] = U_SSᵀ U[S, :], eq. (13) Δ = −W_S (Ĥ⁻¹_SS)⁻¹ Ĥ⁻¹_S: becomes
    Δ_S = −W_S and Δ_K = −E U_SK with E = W_S U_SS⁻¹ (one triangular solve, no inverse).

    Returns ``delta_kept`` (n, in − removed) for the kept columns and the objective increase
    tr(Δ Ĥ Δᵀ) = ‖E‖_F² per row (n,).
    """
    U_SS = U[:removed, :removed]  # (s, s) upper-triangular
    E = torch.linalg.solve_triangular(U_SS, W_rows[:, :removed], upper=True, left=False)  # (n, s)
    return -(E @ U[:removed, removed:]), (E**2).sum(1)
