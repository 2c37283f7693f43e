"""Thanos: the multi-weight update against direct least squares, masks, sparsity, events, errors.

Also the structured (column) baselines of SparseGPT and Wanda that the paper compares with (§4.7).
Small shapes only: the whole file runs in a few seconds on CPU.
"""

from __future__ import annotations

import math
from types import ModuleType

import pytest
import torch
from torch import Tensor

from tests.helpers.stats import correlated_stats
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import BlockStep, Event, RunWarning
from toolkit.methods import get_method, magnitude, sparsegpt, thanos, wanda
from toolkit.methods.base import LinearStats, PruneResult, SolveContext
from toolkit.methods.masks import nm_violations
from toolkit.methods.thanos_update import multiweight_update, removal_positions, residual_block_mask, structured_update
from toolkit.spec.targets import NM, Structured, Target, Unstructured


def _problem(rows: int, cols: int, seed: int = 0, tokens: int = 1024) -> tuple[Tensor, LinearStats]:
    W = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed + 1))
    return W, correlated_stats(cols, tokens, seed)[1]


def _recon(W: Tensor, W_new: Tensor, H: Tensor) -> float:
    """tr(ΔW H ΔWᵀ) = ‖ΔW X‖²/N."""
    D = (W_new - W).double()
    return float(torch.trace(D @ H.double() @ D.T))


def _run(W: Tensor, stats: LinearStats, target: Target, method: ModuleType = thanos,
         **options: object) -> tuple[PruneResult, list[Event]]:
    events: list[Event] = []
    ctx = SolveContext(layer=3, name="mlp.fc1", emit=events.append)
    result = method.SPEC.fn(W, stats, target, method.SPEC.make_config(options), ctx)
    return result, events


def _damped(H: Tensor, damp_frac: float = 0.01) -> Tensor:
    H = H.double()
    return H + damp_frac * torch.mean(torch.diagonal(H)) * torch.eye(H.shape[0], dtype=H.dtype)


# ---------------------------------------------------------------- the multi-weight update (eq. 10)


def _kkt_rows(W: Tensor, H: Tensor, prune: Tensor) -> Tensor:
    """min δ H δᵀ s.t. δ_q = −w_q, row by row, by a direct KKT solve in float64."""
    f = H.shape[0]
    deltas = torch.zeros(W.shape, dtype=torch.float64)
    for i in range(W.shape[0]):
        q = torch.nonzero(prune[i]).flatten()
        if (s := q.numel()) == 0:
            continue
        E = torch.eye(f, dtype=torch.float64)[q]  # (s, f) constraint rows
        kkt = torch.zeros(f + s, f + s, dtype=torch.float64)
        kkt[:f, :f], kkt[:f, f:], kkt[f:, :f] = H, E.T, E
        rhs = torch.cat([torch.zeros(f, dtype=torch.float64), -W[i, q].double()])
        deltas[i] = torch.linalg.solve(kkt, rhs)[:f]
    return deltas


def _update(W: Tensor, H64: Tensor, prune: Tensor) -> tuple[Tensor, Tensor]:
    B = prune.shape[1]
    U = torch.linalg.cholesky(torch.linalg.inv(H64), upper=True).float()  # Uᵀ U = H⁻¹
    return multiweight_update(W[:, :B].float(), U[:B, :B], U[:B], prune)


def test_multiweight_update_equals_direct_least_squares() -> None:
    """δ̂ = −u R̂⁻¹ R is the constrained least-squares solution min ‖δ X‖² s.t. δ_q = −w_q."""
    f, B, tokens = 24, 10, 200
    X = correlated_stats(f, tokens, seed=5)[0].double()  # (tokens, f)
    H = X.T @ X / tokens
    W = torch.randn(7, f, dtype=torch.float64)
    prune = torch.zeros(7, B, dtype=torch.bool)
    prune[0, [1, 4]] = True  # s = 2
    prune[1, 3] = True  # s = 1
    prune[3, :8] = True  # s > B/2: the complement path
    prune[4] = True  # the whole block
    prune[5, ::3] = True
    prune[6, [0, 9]] = True  # row 2 removes nothing
    delta, loss = _update(W, H, prune)
    # direct: the free columns K solve min ‖δ_K X_K + δ_q X_q‖² by lstsq on the tokens
    for i in range(7):
        q = torch.nonzero(prune[i]).flatten()
        free = torch.ones(f, dtype=torch.bool)
        free[q] = False
        d_q = -W[i, q]
        d_K = torch.linalg.lstsq(X[:, free], -(X[:, q] @ d_q).unsqueeze(1)).solution.squeeze(1)
        expected = torch.zeros(f, dtype=torch.float64)
        expected[q], expected[free] = d_q, d_K
        assert torch.allclose(delta[i].double(), expected, rtol=1e-3, atol=1e-3 * W.abs().max())
        assert loss[i].item() == pytest.approx(float(expected @ H @ expected), rel=1e-3, abs=1e-6)
    assert torch.allclose(delta.double(), _kkt_rows(W, H, prune), atol=1e-3 * W.abs().max())
    assert torch.allclose(delta[:, :B][prune], -W[:, :B][prune].float(), atol=1e-3)  # δ̂_q = −u


def test_single_weight_reduces_to_obs() -> None:
    """s = 1: δ = −(w_q / [H⁻¹]_qq) H⁻¹_q: (eq. 4)."""
    W, stats = _problem(5, 16, seed=2)
    H = _damped(stats.gram)
    Hinv = torch.linalg.inv(H)
    prune = torch.zeros(5, 8, dtype=torch.bool)
    qs = [0, 3, 7, 5, 2]
    prune[torch.arange(5), qs] = True
    delta, loss = _update(W, H, prune)
    for i, q in enumerate(qs):
        obs = -(W[i, q].double() / Hinv[q, q]) * Hinv[q]
        assert torch.allclose(delta[i].double(), obs, rtol=1e-4, atol=1e-5)
        assert loss[i].item() == pytest.approx(float(W[i, q] ** 2 / Hinv[q, q]), rel=1e-4)


def test_padded_batch_equals_per_row_solves() -> None:
    """Rows with different s_i solved in one padded batch give the unpadded per-row answers."""
    W, stats = _problem(40, 32, seed=3)
    H = _damped(stats.gram)
    prune = torch.rand(40, 16, generator=torch.Generator().manual_seed(4)) < 0.45
    delta, _ = _update(W, H, prune)
    Hinv = torch.linalg.inv(H)
    for i in range(40):  # the per-row reference: R = rows q of H⁻¹, λ R̂ = u, δ = −λ R
        q = torch.nonzero(prune[i]).flatten()
        if q.numel() == 0:
            assert torch.all(delta[i] == 0)
            continue
        R = Hinv[q]
        lam = torch.linalg.solve(R[:, q], W[i, q].double())
        assert torch.allclose(delta[i].double(), -lam @ R, rtol=1e-4, atol=1e-4)


def test_phi_and_psi_match_the_paper_examples() -> None:
    """φ(1,0,0,1,1) = (1,4,5), φ(0,0,1,1,0) = (3,4) (1-based); ψ_X examples of §F.4."""
    positions, valid = removal_positions(torch.tensor([[1, 0, 0, 1, 1], [0, 0, 1, 1, 0]], dtype=torch.bool))
    assert positions[0].tolist() == [0, 3, 4]
    assert positions[1][valid[1]].tolist() == [2, 3]
    W = torch.tensor([[3.0, -2.0], [-2.0, 4.0], [1.0, -6.0]])
    metric = W.abs() * torch.tensor([5.0, 1.0])  # ‖X_1:‖ = 5, ‖X_2:‖ = 1
    expected = {1: [[0, 1], [0, 0], [0, 0]], 2: [[0, 1], [0, 1], [0, 0]], 4: [[0, 1], [0, 1], [1, 1]]}
    for count, mask in expected.items():
        assert residual_block_mask(metric, count, 2).int().tolist() == mask
    assert residual_block_mask(metric, 4, 1).int().tolist() == [[0], [0], [1]]  # local block part
    ties = torch.zeros(2, 3)
    assert int(residual_block_mask(ties, 4, 3).sum()) == 4  # exact count despite ties


def test_structured_closed_form_equals_eq13() -> None:
    """Δ = −W_S (H⁻¹_SS)⁻¹ H⁻¹_S: (eq. 13) via the Cholesky factor of the permuted inverse."""
    W, stats = _problem(6, 20, seed=6)
    H = _damped(stats.gram)
    Hinv = torch.linalg.inv(H)
    S = 5
    U = torch.linalg.cholesky(Hinv, upper=True)  # Uᵀ U = H⁻¹, columns already "S first"
    delta_kept, loss = structured_update(W.float(), U.float(), S)
    expected = -W.double()[:, :S] @ torch.linalg.inv(Hinv[:S, :S]) @ Hinv[:S, :]
    assert torch.allclose(expected[:, :S], -W.double()[:, :S])
    assert torch.allclose(delta_kept.double(), expected[:, S:], rtol=1e-3, atol=1e-4)
    full = torch.cat([-W.double()[:, :S], delta_kept.double()], 1)
    assert loss.double() == pytest.approx(torch.einsum("ij,jk,ik->i", full, H, full), rel=1e-3)


# ---------------------------------------------------------------- the whole sweep against a reference


def _reference_sweep(W: Tensor, H: Tensor, keep: Tensor, p: float, block: int) -> Tensor:
    """Alg. 1 as printed: per block ψ_X on the current weights, Hinv = inv(H[j1:, j1:]), a loop over rows.

    It uses the solver's block masks (``keep``) so that a near-tie cannot make the two runs diverge,
    and checks that its own ψ_X agrees with them away from the threshold.
    """
    W = W.double().clone()
    norms = torch.sqrt(torch.diagonal(H.double()))  # ‖X_j‖ (undamped)
    H = _damped(H)
    rows, cols = W.shape
    remaining = int(p * rows * cols)
    for j1 in range(0, cols, block):
        j2 = min(j1 + block, cols)
        metric = W[:, j1:].abs() * norms[j1:]  # Wanda score of the current weights
        prune = ~keep[:, j1:j2]
        if remaining:
            threshold = torch.sort(metric.flatten()).values[remaining - 1]
            mine = metric[:, : j2 - j1] <= threshold
            differ = mine != prune
            assert torch.all((metric[:, : j2 - j1][differ] - threshold).abs() <= 1e-4 * threshold)
        Hinv = torch.linalg.inv(H[j1:, j1:])  # the official code's per-block inverse
        for i in range(rows):
            q = torch.nonzero(prune[i]).flatten()
            if q.numel():
                R = Hinv[q]
                W[i, j1:] -= torch.linalg.solve(R[:, q], W[i, j1 + q]) @ R
        W[:, j1:j2][prune] = 0.0
        remaining -= int(prune.sum())
    return W


@pytest.mark.parametrize("p", [0.5, 0.7])
def test_sweep_matches_per_row_reference_and_is_exactly_sparse(p: float) -> None:
    W, stats = _problem(24, 40, seed=7)
    result, events = _run(W, stats, Unstructured(p), block_size=16)
    expected_removed = int(p * 24 * 40)
    assert int((~result.keep_mask).sum()) == expected_removed
    assert torch.all(result.weight[~result.keep_mask] == 0)
    reference = _reference_sweep(W, stats.gram, result.keep_mask, p, 16)
    assert torch.allclose(result.weight.double(), reference, rtol=1e-3, atol=1e-3 * float(W.abs().max()))
    steps = [e for e in events if isinstance(e, BlockStep)]
    assert [e.block for e in steps] == [0, 1, 2]
    assert sum(e.removed for e in steps) == expected_removed
    assert all(e.layer == 3 and e.name == "mlp.fc1" and e.seconds >= 0 for e in steps)
    total = _recon(W, result.weight, _damped(stats.gram).float())  # errors add up (damped objective)
    assert sum(e.error for e in steps) == pytest.approx(total, rel=1e-3)
    assert result.info["outlier_rows"] == [] and result.damping == pytest.approx(0.01)


# ---------------------------------------------------------------- patterns


@pytest.mark.parametrize("p", [0.5, 0.7])
def test_unstructured_exact_sparsity(p: float) -> None:
    W, stats = _problem(48, 256, seed=8)
    result, _ = _run(W, stats, Unstructured(p))
    assert int((~result.keep_mask).sum()) == int(p * W.numel())
    assert torch.all(result.weight[~result.keep_mask] == 0)
    assert result.info["block_size"] == 128


def test_unstructured_explicit_alpha_keeps_rows_dense() -> None:
    W, stats = _problem(20, 64, seed=9)
    result, _ = _run(W, stats, Unstructured(0.5), alpha=0.1)
    outliers = result.info["outlier_rows"]
    assert len(outliers) == 2
    assert torch.all(result.keep_mask[outliers])
    assert torch.equal(result.weight[outliers], W[outliers])
    assert int((~result.keep_mask).sum()) == int(0.5 * W.numel())


@pytest.mark.parametrize("pattern", [NM(2, 4), NM(4, 8)])
@pytest.mark.parametrize("alpha", [0.1, 0.0])
def test_nm_valid_with_outlier_rows_exempt(pattern: NM, alpha: float) -> None:
    W, stats = _problem(30, 64, seed=10)
    result, events = _run(W, stats, pattern, alpha=alpha)
    outliers = result.info["outlier_rows"]
    assert len(outliers) == math.ceil(alpha * 30)
    rest = torch.ones(30, dtype=torch.bool)
    rest[outliers] = False
    keep = result.keep_mask
    assert nm_violations(keep[rest], pattern) == 0
    assert torch.all(keep[rest].reshape(-1, pattern.m).sum(1) == pattern.n)  # exactly n of m kept
    assert torch.all(keep[~rest])
    assert torch.equal(result.weight[~rest], W[~rest])  # outlier rows neither pruned nor updated
    assert torch.all(result.weight[~keep] == 0)
    assert len([e for e in events if isinstance(e, BlockStep)]) == 1  # 512 clamped silently to 64


def test_nm_outliers_have_the_largest_row_loss() -> None:
    W, stats = _problem(30, 32, seed=11)
    W[7] *= 10
    W[19] *= 8
    W[2] *= 6
    result, _ = _run(W, stats, NM(2, 4), alpha=0.1)
    assert result.info["outlier_rows"] == [2, 7, 19]
    diag, _ = _run(W, stats, NM(2, 4), alpha=0.1, row_score="diag")
    assert diag.info["outlier_rows"] == [2, 7, 19]


@pytest.mark.parametrize("alpha", [0.1, 0.0])
def test_structured_removes_whole_columns_of_non_outlier_rows(alpha: float) -> None:
    W, stats = _problem(40, 50, seed=12)
    result, events = _run(W, stats, Structured(0.3), alpha=alpha)
    outliers, removed = result.info["outlier_rows"], result.info["removed_columns"]
    assert len(outliers) == math.ceil(alpha * 40)
    assert len(removed) == math.ceil(0.3 * 50 / (1 - alpha))  # s = ⌈p·in/(1−α)⌉: 17, or 15
    rest = torch.ones(40, dtype=torch.bool)
    rest[outliers] = False
    cols = torch.zeros(50, dtype=torch.bool)
    cols[removed] = True
    assert torch.equal(result.keep_mask[rest], (~cols).expand(int(rest.sum()), -1))
    assert torch.all(result.keep_mask[~rest])
    assert torch.all(result.weight[rest][:, cols] == 0)
    assert torch.equal(result.weight[~rest], W[~rest])
    (step,) = [e for e in events if isinstance(e, BlockStep)]
    assert step.removed == len(removed) * int(rest.sum())
    assert step.error == pytest.approx(_recon(W, result.weight, _damped(stats.gram).float()), rel=1e-3)


def test_structured_picks_the_columns_with_the_smallest_v() -> None:
    W, stats = _problem(10, 16, seed=13)
    W[:, [3, 11]] *= 1e-3
    result, _ = _run(W, stats, Structured(0.1), alpha=0.0)
    assert result.info["removed_columns"] == [3, 11]


# ---------------------------------------------------------------- quality on correlated inputs


@pytest.mark.parametrize(
    "target", [Unstructured(0.5), Unstructured(0.7), NM(2, 4), NM(4, 8), Structured(0.3)], ids=str
)
def test_reconstruction_error_beats_wanda_and_magnitude(target: Target) -> None:
    W, stats = _problem(64, 256, seed=14, tokens=2048)
    options = {"alpha": 0.0} if not isinstance(target, Unstructured) else {}
    ours = _recon(W, _run(W, stats, target, **options)[0].weight, stats.gram)
    assert ours <= _recon(W, _run(W, stats, target, wanda)[0].weight, stats.gram)
    assert ours <= _recon(W, _run(W, stats, target, magnitude)[0].weight, stats.gram)
    if isinstance(target, Structured):  # the paper's structured claim: better than SparseGPT too
        assert ours <= _recon(W, _run(W, stats, target, sparsegpt)[0].weight, stats.gram)


# ---------------------------------------------------------------- contract: options, errors, events


@pytest.mark.parametrize("alpha", ["1", "1.5", "-0.5", "-2"])
def test_alpha_out_of_range_raises(alpha: str) -> None:
    with pytest.raises(ToolkitError, match="alpha"):
        thanos.SPEC.make_config({"alpha": alpha})


def test_bad_options_raise() -> None:
    with pytest.raises(ToolkitError, match="block_size"):
        thanos.SPEC.make_config({"block_size": -4})
    with pytest.raises(ToolkitError, match="damp_frac"):
        thanos.SPEC.make_config({"damp_frac": -1})
    with pytest.raises(ToolkitError, match="row_score"):
        thanos.SPEC.make_config({"row_score": "cheap"})


def test_structured_removing_every_column_raises() -> None:
    W, stats = _problem(8, 16, seed=15)
    with pytest.raises(ToolkitError, match="every column"):
        _run(W, stats, Structured(0.95))  # α = 0.1: ⌈0.95·16/0.9⌉ = 17 ≥ 16
    with pytest.raises(ToolkitError, match="non-outlier rows"):
        _run(W, stats, Unstructured(0.95), alpha=0.5)


def test_block_size_wider_than_input_is_clamped_with_a_warning() -> None:
    W, stats = _problem(8, 32, seed=16)
    result, events = _run(W, stats, Unstructured(0.5), block_size=100)
    warnings = [e for e in events if isinstance(e, RunWarning)]
    assert len(warnings) == 1 and "clamped" in warnings[0].message and warnings[0].name == "mlp.fc1"
    assert result.info["block_size"] == 32
    assert len([e for e in events if isinstance(e, BlockStep)]) == 1


@pytest.mark.parametrize("target", [Unstructured(0.5), NM(2, 4), Structured(0.3)], ids=str)
def test_inputs_not_mutated_and_paper_alpha(target: Target) -> None:
    W, stats = _problem(16, 32, seed=17)
    W_before, H_before = W.clone(), stats.gram.clone()
    result, _ = _run(W, stats, target)
    assert torch.equal(W, W_before) and torch.equal(stats.gram, H_before)
    assert result.info["alpha"] == (0.0 if isinstance(target, Unstructured) else 0.1)  # alpha = -1
    assert len(result.info["outlier_rows"]) == (0 if isinstance(target, Unstructured) else 2)
    assert result.weight.dtype == torch.float32 and result.keep_mask.dtype == torch.bool
    assert result.keep_mask.shape == W.shape and torch.isfinite(result.weight).all()


def test_dead_inputs_and_cancel() -> None:
    W, stats = _problem(8, 32, seed=18)
    stats.gram[5, :] = 0.0
    stats.gram[:, 5] = 0.0
    result, _ = _run(W, stats, Unstructured(0.5))
    assert torch.isfinite(result.weight).all() and torch.all(result.weight[:, 5] == 0)
    ctx = SolveContext(cancelled=lambda: True)
    with pytest.raises(RunCancelled):
        thanos.prune(W, stats, Unstructured(0.5), thanos.ThanosConfig(), ctx)


def test_registered_with_all_targets() -> None:
    spec = get_method("thanos")
    assert spec is thanos.SPEC
    assert all(spec.supports(t) for t in (Unstructured(0.5), NM(2, 4), Structured(0.3)))
    names = [o["name"] for o in spec.describe_options()]
    assert names == ["block_size", "alpha", "damp_frac", "row_score"]


# ---------------------------------------------------------------- structured baselines (paper §4.7)


@pytest.mark.parametrize("method", [sparsegpt, wanda], ids=["sparsegpt", "wanda"])
@pytest.mark.parametrize("p", [0.3, 0.5])
def test_structured_baselines_remove_whole_columns(method: ModuleType, p: float) -> None:
    W, stats = _problem(24, 200, seed=19)
    result, _ = _run(W, stats, Structured(p), method)
    keep = result.keep_mask
    assert torch.all(keep == keep[0])  # the same columns in every row
    assert int((~keep[0]).sum()) == int(p * 200)  # exactly ⌊p·in⌋ columns
    assert torch.all(result.weight[:, ~keep[0]] == 0)


def test_structured_wanda_uses_mean_score_and_sparsegpt_updates() -> None:
    W, stats = _problem(12, 40, seed=20)
    result, _ = _run(W, stats, Structured(0.25), wanda)
    score = (W.abs() * torch.sqrt(torch.diagonal(stats.gram))).mean(0)
    expected = torch.sort(torch.topk(score, 10, largest=False).indices).values
    assert torch.nonzero(~result.keep_mask[0]).flatten().tolist() == expected.tolist()
    assert torch.equal(result.weight[:, result.keep_mask[0]], W[:, result.keep_mask[0]])  # no update
    gpt, _ = _run(W, stats, Structured(0.25), sparsegpt)
    assert not torch.equal(gpt.weight[:, gpt.keep_mask[0]], W[:, gpt.keep_mask[0]])  # OBS updates
    assert _recon(W, gpt.weight, stats.gram) < _recon(W, W * gpt.keep_mask, stats.gram)
