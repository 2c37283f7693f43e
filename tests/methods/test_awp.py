"""AWP: projections by hand, t = 0 equivalences, PGD properties, joint invariants, errors and events."""

from __future__ import annotations

import math

import pytest
import torch

from tests.helpers.stats import correlated_stats
from toolkit.engine.solve import reconstruction_errors
from toolkit.errors import NumericalError, RunCancelled, ToolkitError
from toolkit.events import RunWarning, SolverStep
from toolkit.methods import awp, get_method, rtn, wanda
from toolkit.methods.awp_projection import Projector, RowMask, keep_largest_per_row, project_sparse
from toolkit.methods.awp_solver import Quadratic
from toolkit.methods.base import LinearStats, SolveContext
from toolkit.methods.masks import keep_topk_per_row, nm_violations
from toolkit.methods.quant_grid import dequantize, quantize, zero_point_codes
from toolkit.spec.compression import Compression, QuantSpec
from toolkit.spec.targets import NM, Structured, Unstructured

INT4 = QuantSpec(4, 64)


def solve(W, stats, target, quant=None, events=None, **options):
    ctx = SolveContext(layer=1, name="mlp.up_proj", quant=quant,
                       emit=events.append if events is not None else lambda e: None)
    return awp.prune(W, stats, target, awp.SPEC.make_config(options), ctx)


@pytest.fixture(scope="module")
def problem() -> tuple[torch.Tensor, LinearStats]:
    """Seeded correlated inputs (width 256) and a seeded weight (128, 256)."""
    _, stats = correlated_stats(256, seed=0)
    return torch.randn(128, 256, generator=torch.Generator().manual_seed(100)), stats


def rel_error(W, new, stats) -> float:
    return reconstruction_errors(W, new, stats)[0]


# --- projections by hand ---------------------------------------------------------------------

def test_row_topk_and_nm_projection_hand_cases() -> None:
    Z = torch.tensor([[0.1, -0.8, 0.3, -0.05], [1.0, 2.0, -3.0, 0.5]])
    P, keep = project_sparse(Z, Unstructured(0.5))
    assert keep.tolist() == [[False, True, True, False], [False, True, True, False]]
    assert torch.equal(P, Z * keep)
    Z8 = torch.tensor([[1.0, -4.0, 3.0, 2.0, -0.5, 0.1, 0.2, -0.3]])
    assert project_sparse(Z8, NM(2, 4))[1].tolist() == [[False, True, True, False, True, False, False, True]]
    # k = in − ⌊p·in⌋ (Wanda's count): 30 % of 10 columns prunes 3 per row
    assert int(project_sparse(torch.randn(3, 10), Unstructured(0.3))[1].sum(1).unique()) == 7


def test_fast_row_topk_equals_the_sparsity_helper_with_and_without_ties() -> None:
    gen = torch.Generator().manual_seed(5)
    for scores in (torch.rand(20, 64, generator=gen), torch.randint(0, 4, (20, 64), generator=gen).float()):
        for prune in (0, 1, 31, 32, 63, 64):
            assert torch.equal(keep_largest_per_row(scores, prune), keep_topk_per_row(scores, prune))


def test_a_previous_mask_as_hint_never_changes_the_selected_mask() -> None:
    """Warm start from the last step's mask: right hint, a few rows moved, ties, a NaN row, a bad hint."""
    gen = torch.Generator().manual_seed(6)
    scores = torch.rand(40, 96, generator=gen)
    prune = 48
    exact = keep_topk_per_row(scores, prune)
    moved = scores.clone()
    moved[[3, 17], :2] = moved[[3, 17], :2] + 1.0  # two rows change their top-k set
    ties = torch.randint(0, 3, (40, 96), generator=gen).float()
    nan_row = scores.clone()
    nan_row[5, 7] = torch.nan
    wrong = keep_topk_per_row(torch.rand(40, 96, generator=gen), prune)  # same counts, unrelated mask
    for case in (scores, moved, ties, nan_row):
        for hint in (exact, wrong):
            warm = keep_largest_per_row(case, prune, RowMask.of(hint, case.dtype))
            assert torch.equal(warm, keep_largest_per_row(case, prune))
    assert keep_largest_per_row(scores, prune, RowMask.of(exact, scores.dtype)) is exact  # no selection


def test_the_projector_warm_start_gives_the_cold_projection_every_step() -> None:
    gen = torch.Generator().manual_seed(7)
    projector = Projector(Unstructured(0.5), None)
    Z = torch.randn(24, 64, generator=gen)
    for step in range(1, 6):
        Z = Z + 0.05 * torch.randn(24, 64, generator=gen)
        assert torch.equal(projector(Z, step).keep, project_sparse(Z, Unstructured(0.5))[1])


def test_a_value_on_the_grid_stays_and_the_min_max_grid_round_trips() -> None:
    Z = torch.tensor([[0.0, 0.5, 1.0, 1.5], [-1.5, -0.5, 0.0, 1.5]])  # exact grids of 2 bits, step 0.5 / 1.0
    spec = QuantSpec(2, 4)
    state = quantize(Z, spec)
    assert state.codes.tolist() == [[0, 1, 2, 3], [0, 2, 2, 3]]  # row 2: s = 1, z = 2 (round half to even)
    assert torch.equal(Projector(None, spec)(Z, 1).theta, torch.tensor([[0.0, 0.5, 1.0, 1.5], [-2.0, 0.0, 0.0, 1.0]]))
    assert torch.equal(Projector(None, spec)(Z[:1], 1).theta, Z[:1])
    W = torch.randn(16, 128, generator=torch.Generator().manual_seed(1))
    first = quantize(W, INT4)
    again = quantize(dequantize(first), INT4)
    assert torch.equal(again.codes, first.codes)
    assert torch.allclose(dequantize(again), dequantize(first), rtol=0, atol=1e-6)


def test_joint_projection_zeroes_off_mask_with_zero_point_codes() -> None:
    Z = torch.tensor([[0.9, -0.2, 0.4, -1.1, 0.05, 0.7, -0.6, 0.3]])
    spec = QuantSpec(2, 4)
    for order in ("prune_first", "quant_first"):
        it = Projector(Unstructured(0.5), spec, order=order)(Z, 1)
        assert int(it.keep.sum()) == 4 and bool((it.theta[~it.keep] == 0).all())
        assert torch.equal(it.theta, dequantize(it.state))
        assert torch.equal(it.state.codes[~it.keep], zero_point_codes(it.state)[~it.keep])


# --- t = 0 equivalences ----------------------------------------------------------------------

@pytest.mark.parametrize("target", (Unstructured(0.5), NM(2, 4)), ids=str)
def test_zero_iterations_reproduce_wanda(problem, target) -> None:
    W, stats = problem
    result = solve(W, stats, target, prune_iters=0)
    reference = wanda.prune(W, stats, target, wanda.WandaConfig(), SolveContext())
    assert torch.equal(result.keep_mask, reference.keep_mask)
    assert torch.equal(result.weight, reference.weight)
    assert result.quant is None


@pytest.mark.parametrize("spec", (INT4, QuantSpec(3, 128), QuantSpec(4, 0, symmetric=True)), ids=str)
def test_zero_iterations_reproduce_rtn(problem, spec) -> None:
    W, stats = problem
    result = solve(W, stats, None, quant=spec, quant_iters=0)
    reference = rtn.quantize_linear(W, stats, None, rtn.RTNConfig(), SolveContext(quant=spec))
    assert torch.equal(result.weight, reference.weight)
    assert torch.equal(result.quant.codes, reference.quant.codes)
    assert bool(result.keep_mask.all())


# --- PGD properties --------------------------------------------------------------------------

@pytest.mark.parametrize("case", [(Unstructured(0.5), None), (Unstructured(0.7), None), (None, INT4),
                                  (None, QuantSpec(3, 64)), (None, QuantSpec(2, 64))], ids=str)
def test_keep_best_never_ends_above_the_initial_objective(problem, case) -> None:
    W, stats = problem
    best = solve(W, stats, case[0], quant=case[1], keep_best=True)
    assert best.info["objective"] <= best.info["objective_init"]
    last = solve(W, stats, case[0], quant=case[1])  # the paper's last iterate: finite, maybe above init (A18)
    assert math.isfinite(last.info["objective"]) and bool(torch.isfinite(last.weight).all())
    assert last.info["returned"] == "last"


def test_prune_fixed_point_satisfies_the_projected_gradient_condition() -> None:
    """On a strictly convex quadratic, IHT with η ≤ 1/λ_max stops at Θ = H_k(Θ + η(W−Θ)C):
    zero gradient on the support and no pruned gradient entry larger than the smallest kept weight."""
    gen = torch.Generator().manual_seed(4)
    A = torch.randn(16, 64, generator=gen)
    C = A @ A.T / 64 + 0.5 * torch.eye(16)
    W = torch.randn(4, 16, generator=gen)
    result = solve(W, LinearStats(C, 64), Unstructured(0.5), prune_iters=5000, prune_eta=1.0,
                   stop_rule="rel_change", tol=1e-12)
    assert result.info["stop"] == "tol"
    theta, keep = result.weight, result.keep_mask
    eta = 1.0 / float(torch.linalg.norm(C))
    G = (W - theta) @ C
    assert float(G[keep].abs().max()) < 1e-4
    kept_min = torch.where(keep, theta.abs(), torch.inf).amin(1)
    off_max = torch.where(keep, 0.0, eta * G.abs()).amax(1)
    assert bool((off_max <= kept_min + 1e-6).all())


def test_residual_is_minus_half_the_gradient_and_the_loss_identity() -> None:
    gen = torch.Generator().manual_seed(2)
    X = torch.randn(200, 12, generator=gen)
    W, theta = torch.randn(3, 12, generator=gen), torch.randn(3, 12, generator=gen).requires_grad_()
    loss = torch.sum((X @ (W - theta).T) ** 2) / 200
    loss.backward()
    q = Quadratic.build(W, X.T @ X / 200)
    G, rel = q.residual(theta.detach())
    assert torch.allclose(G, -0.5 * theta.grad, atol=1e-5)
    assert rel == pytest.approx(math.sqrt(loss.item() / float(torch.sum((X @ W.T) ** 2) / 200)), rel=1e-5)


def test_iterates_do_not_depend_on_the_scale_of_c(problem) -> None:
    W, stats = problem
    scaled = LinearStats(stats.gram * 7.0, stats.count)
    for target, spec in ((Unstructured(0.5), None), (None, INT4)):
        a = solve(W, stats, target, quant=spec, prune_iters=20, stop_rule="none")
        b = solve(W, scaled, target, quant=spec, prune_iters=20, stop_rule="none")
        assert torch.allclose(a.weight, b.weight, atol=1e-4)


def test_bf16_step_keeps_the_exact_residual_bounded_and_the_solution_close(problem) -> None:
    """step_dtype=bfloat16 rounds (W − Θ) and C to bf16 in the step's matmul only: G is within the
    bf16 rounding of the float32 G, and the solves end at nearly the same error and mask."""
    W, stats = problem
    theta = solve(W, stats, Unstructured(0.5), prune_iters=0).weight
    exact, _ = Quadratic.build(W, stats.gram).residual(theta)
    low, _ = Quadratic.build(W, stats.gram, torch.bfloat16).residual(theta)
    assert low.dtype == torch.float32 and not torch.equal(low, exact)
    assert float(torch.linalg.norm(low - exact)) < 2e-2 * float(torch.linalg.norm(exact))
    for target, spec in ((Unstructured(0.5), None), (Unstructured(0.5), INT4), (None, INT4)):
        a = solve(W, stats, target, quant=spec)
        b = solve(W, stats, target, quant=spec, step_dtype="bfloat16")
        assert rel_error(W, b.weight, stats) == pytest.approx(rel_error(W, a.weight, stats), rel=2e-2)
        assert float((a.keep_mask == b.keep_mask).float().mean()) > 0.98
    with pytest.raises(ToolkitError, match="step_dtype"):
        awp.SPEC.make_config({"step_dtype": "float16"})


def test_awp_beats_wanda_when_pruning(problem) -> None:
    W, stats = problem
    for target in (Unstructured(0.5), NM(2, 4)):
        base = wanda.prune(W, stats, target, wanda.WandaConfig(), SolveContext()).weight
        assert rel_error(W, solve(W, stats, target).weight, stats) < rel_error(W, base, stats)


@pytest.mark.parametrize("bits", (4, 3))
def test_awp_beats_rtn_when_quantizing(problem, bits) -> None:
    W, stats = problem
    spec = QuantSpec(bits, 64)
    base = rtn.quantize_linear(W, stats, None, rtn.RTNConfig(), SolveContext(quant=spec)).weight
    assert rel_error(W, solve(W, stats, None, quant=spec).weight, stats) < rel_error(W, base, stats)


# --- joint mode ------------------------------------------------------------------------------

@pytest.mark.parametrize("target", (Unstructured(0.5), Unstructured(0.25), NM(2, 4)), ids=str)
@pytest.mark.parametrize("order", ("prune_first", "quant_first"))
def test_joint_is_exactly_sparse_and_on_the_grid(problem, target, order) -> None:
    W, stats = problem
    result = solve(W, stats, target, quant=INT4, joint_order=order)
    keep, state = result.keep_mask, result.quant
    if isinstance(target, NM):
        assert nm_violations(keep, target) == 0 and int(keep.sum()) == W.numel() // 2
    else:
        assert bool((keep.sum(1) == 256 - int(256 * target.sparsity)).all())
    assert bool((result.weight[~keep] == 0).all())
    assert torch.equal(result.weight, dequantize(state))  # on the grid, zeros included
    assert torch.equal(state.codes[~keep], zero_point_codes(state)[~keep])
    assert int(state.codes.max()) <= 15 and result.info["mode"] == "joint"


@pytest.mark.parametrize("sparsity", (0.5, 0.75))
def test_joint_default_is_activation_aware_and_near_wanda_awq(problem, sparsity) -> None:
    """From W the ramp keeps the largest |W| (≈2× Wanda+AWQ's error); the default starts from Wanda."""
    W, stats = problem
    target = Unstructured(sparsity)
    two_stage = get_method("wanda+awq")
    base = two_stage.fn(W, stats, target, two_stage.make_config({}), SolveContext(quant=INT4)).weight
    error = rel_error(W, solve(W, stats, target, quant=INT4).weight, stats)
    dense = rel_error(W, solve(W, stats, target, quant=INT4, joint_init="dense").weight, stats)
    assert error < 1.1 * rel_error(W, base, stats)
    assert error < 0.6 * dense


def test_joint_without_joint_iterations_still_quantizes(problem) -> None:
    W, stats = problem
    result = solve(W, stats, Unstructured(0.5), quant=INT4, joint_iters=0, hold_iters=2, ramp_iters=2)
    assert result.quant is not None and torch.equal(result.weight, dequantize(result.quant))
    assert bool((result.keep_mask.sum(1) == 128).all())


def test_frozen_grid_keeps_the_rtn_scales(problem) -> None:
    W, stats = problem
    result = solve(W, stats, None, quant=INT4, grid_update="frozen")
    assert torch.equal(result.quant.scales, quantize(W, INT4).scales)


# --- stop rules, divergence, events, errors --------------------------------------------------

def test_stop_rules(problem) -> None:
    W, stats = problem
    early = solve(W, stats, Unstructured(0.5), stop_rule="full_grad", tol=1e9)
    assert early.info["stop"] == "tol" and early.info["iterations"] == 0
    one = solve(W, stats, Unstructured(0.5), stop_rule="rel_change", tol=10.0)
    assert one.info["stop"] == "tol" and one.info["iterations"] == 1
    full = solve(W, stats, Unstructured(0.5), prune_iters=30)
    assert full.info["stop"] == "max_iter" and full.info["iterations"] == 30 and full.info["stop_rule"] == "full_grad"


def test_divergence_warns_and_falls_back_to_the_best_iterate(problem) -> None:
    W, stats = problem
    events: list = []
    result = solve(W, stats, Unstructured(0.5), events=events, prune_eta=1e6)
    assert any(isinstance(e, RunWarning) and "diverged" in e.message for e in events)
    assert result.info["stop"] == "diverged" and result.info["returned"] == "fallback"
    assert bool(torch.isfinite(result.weight).all()) and result.info["objective"] <= result.info["objective_init"]


def test_events_are_thinned_and_carry_the_trace(problem) -> None:
    W, stats = problem
    events: list = []
    solve(W, stats, Unstructured(0.5), quant=INT4, events=events, max_events=20)
    steps = [e for e in events if isinstance(e, SolverStep)]
    assert 20 <= len(steps) <= 22 and steps[0].step == 0 and steps[-1].step == 100
    assert all(e.solver == "awp" and e.layer == 1 and e.name == "mlp.up_proj" for e in steps)
    assert {"proj_dist", "sparsity", "bits", "grad"} <= set(steps[-1].values) and steps[-1].values["bits"] == 4.0
    assert steps[1].values["bits"] == 32.0  # the ramp prunes only
    silent: list = []
    solve(W, stats, Unstructured(0.5), events=silent, max_events=0)
    assert not silent


def test_errors_are_one_line_toolkit_errors(problem) -> None:
    W, stats = problem
    with pytest.raises(ToolkitError, match="structured"):
        solve(W, stats, Structured(0.3))
    with pytest.raises(ToolkitError, match="divisible"):
        solve(W[:, :250], LinearStats(stats.gram[:250, :250], 10), NM(2, 4))
    with pytest.raises(ToolkitError, match="--sparsity"):
        solve(W, stats, None)
    with pytest.raises(NumericalError, match="non-finite"):
        solve(W, LinearStats(stats.gram * torch.nan, 10), Unstructured(0.5))
    with pytest.raises(ToolkitError, match="prune_iters"):
        awp.SPEC.make_config({"prune_iters": "-1"})
    with pytest.raises(ToolkitError, match="structured"):
        get_method("awp").check(Compression(sparsity=Structured(0.3), quant=INT4))
    with pytest.raises(RunCancelled):
        awp.prune(W, stats, Unstructured(0.5), awp.AWPConfig(), SolveContext(cancelled=lambda: True))


def test_dead_inputs_return_the_initial_point_with_a_warning() -> None:
    W = torch.randn(4, 8)
    events: list = []
    result = solve(W, LinearStats(torch.zeros(8, 8), 10), None, quant=QuantSpec(4, 8), events=events)
    assert any(isinstance(e, RunWarning) for e in events) and result.info["iterations"] == 0
    assert torch.equal(result.weight, dequantize(quantize(W, QuantSpec(4, 8))))
