"""FISTAPruner: hand cases, a LASSO reference, the warm-start guarantee, patterns, λ search, events."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.stats import correlated_stats
from toolkit.engine.solve import reconstruction_errors
from toolkit.errors import NumericalError, RunCancelled, ToolkitError
from toolkit.events import LambdaStep, RunWarning, SolverStep
from toolkit.methods import fista, get_method, magnitude, sparsegpt, wanda
from toolkit.methods.base import LinearStats, SolveContext
from toolkit.methods.fista_solver import InnerSettings, build_quadratic, lipschitz, round_to_target, soft_threshold
from toolkit.methods.fista_solver import fista as run_fista
from toolkit.methods.masks import nm_violations
from toolkit.spec.targets import NM, Structured, Unstructured

WARM = {"wanda": wanda, "sparsegpt": sparsegpt, "magnitude": magnitude}


def make_problem(out: int, width: int, tokens: int, seed: int, shift: float = 0.3) -> dict:
    """Correlated dense inputs X (tokens, in), pruned-path inputs X* = X + systematic drift."""
    gen = torch.Generator().manual_seed(seed)
    mix = torch.randn(width, width, generator=gen) / width**0.5  # random covariance mixᵀmix
    X = torch.randn(tokens, width, generator=gen) @ mix + 0.1 * torch.randn(tokens, width, generator=gen)
    drift = torch.randn(width, width, generator=gen) / width**0.5
    Xs = X + shift * X @ drift
    W = torch.randn(out, width, generator=gen)
    stats = LinearStats(gram=Xs.T @ Xs / tokens, count=tokens, cross=Xs.T @ X / tokens,
                        dense_gram=X.T @ X / tokens)
    return {"W": W, "X": X, "Xs": Xs, "stats": stats}


def dense_error(p: dict, A: torch.Tensor) -> float:
    """‖A X* − W X‖_F / ‖W X‖_F computed from the activations themselves."""
    target = p["X"] @ p["W"].T
    return float(torch.linalg.norm(p["Xs"] @ A.T - target) / torch.linalg.norm(target))


def solve(p: dict, target, events: list | None = None, **options) -> fista.PruneResult:
    ctx = SolveContext(layer=2, name="mlp.up_proj", emit=(events.append if events is not None else lambda e: None))
    return fista.prune(p["W"], p["stats"], target, fista.SPEC.make_config(options), ctx)


# --- hand cases -----------------------------------------------------------------------------

def test_soft_threshold_hand_case() -> None:
    x = torch.tensor([-3.0, -1.0, -0.4, 0.0, 0.5, 1.0, 2.5])
    assert soft_threshold(x, 1.0).tolist() == [-2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.5]
    assert torch.equal(soft_threshold(x, 0.0), x)
    assert torch.equal(soft_threshold(x, 0.7), F.softshrink(x, 0.7))


def test_rounding_unstructured_is_over_the_whole_matrix() -> None:
    A = torch.tensor([[10.0, -9.0, 8.0, 7.0], [1.0, -2.0, 3.0, 4.0]])
    weight, keep = round_to_target(A, Unstructured(0.5))
    assert keep.tolist() == [[True, True, True, True], [False, False, False, False]]
    assert torch.equal(weight, A * keep)
    _, keep_row = round_to_target(A, Unstructured(0.5), group="row")
    assert keep_row.tolist() == [[True, True, False, False], [False, False, True, True]]


def test_rounding_nm_hand_case() -> None:
    A = torch.tensor([[1.0, -4.0, 3.0, 2.0, 0.5, 0.1, -0.2, 0.3]])
    weight, keep = round_to_target(A, NM(2, 4))
    assert keep.tolist() == [[False, True, True, False, True, False, False, True]]
    assert torch.equal(weight, torch.tensor([[0.0, -4.0, 3.0, 0.0, 0.5, 0.0, 0.0, 0.3]]))


def test_rounding_keeps_fista_zeros() -> None:
    A = torch.tensor([[0.0, 0.0, 0.0, 5.0]])
    weight, _ = round_to_target(A, Unstructured(0.25))
    assert int((weight == 0).sum()) == 3  # over-sparse results stay over-sparse (no re-densifying)


# --- the convex solver ----------------------------------------------------------------------

def coordinate_descent(G: torch.Tensor, B: torch.Tensor, lam: float, sweeps: int = 100) -> torch.Tensor:
    """Reference: min_A ½tr(A G Aᵀ) − tr(A Bᵀ) + lam‖A‖₁ by cyclic coordinate descent (float64)."""
    G, B = G.double(), B.double()
    A = torch.zeros_like(B)
    for _ in range(sweeps):
        for j in range(G.shape[0]):
            partial = B[:, j] - A @ G[:, j] + A[:, j] * G[j, j]
            A[:, j] = torch.sign(partial) * (partial.abs() - lam).clamp_min(0) / G[j, j]
    return A


@pytest.mark.parametrize("correction", [False, True])
def test_fista_fixed_lambda_reaches_the_lasso_optimum(correction: bool) -> None:
    p = make_problem(out=5, width=8, tokens=400, seed=1)
    s = p["stats"]
    q = build_quadratic(p["W"], s.gram, s.cross if correction else None, s.dense_gram if correction else None,
                        "eigvalsh")
    lam = 0.3  # per-token units: min f(A) + lam‖A‖₁
    out = run_fista(q, torch.zeros_like(p["W"]), lam / q.L, InnerSettings(iters=300, tol=0.0))
    B = p["W"] @ (s.cross.T if correction else s.gram)  # W Cᵀ
    reference = coordinate_descent(s.gram, B, lam)
    assert torch.allclose(out.x.double(), reference, atol=1e-5)
    assert int((reference == 0).sum()) > 0  # the case exercises the ℓ1 term


def test_fista_orthogonal_design_closed_form() -> None:
    W = torch.tensor([[1.0, -0.2, 0.05, -3.0], [0.4, 0.0, -0.6, 2.0]])
    G = 2.0 * torch.eye(4)  # X*ᵀ with orthogonal columns: the LASSO separates
    q = build_quadratic(W, G, None, None, "eigvalsh")
    out = run_fista(q, torch.zeros_like(W), 0.6 / q.L, InnerSettings(iters=50, tol=0.0))
    assert torch.allclose(out.x, F.softshrink(W, 0.6 / 2.0), atol=1e-6)


def test_gram_form_error_matches_activations() -> None:
    p = make_problem(out=6, width=12, tokens=300, seed=2)
    s = p["stats"]
    q = build_quadratic(p["W"], s.gram, s.cross, s.dense_gram, "eigvalsh")
    A = p["W"] * (torch.rand(p["W"].shape, generator=torch.Generator().manual_seed(0)) > 0.5)
    assert q.relative(q.error(A)) == pytest.approx(dense_error(p, A), rel=1e-4)


def test_power_iteration_bounds_lambda_max() -> None:
    G = make_problem(out=2, width=32, tokens=200, seed=3)["stats"].gram
    exact = lipschitz(G, "eigvalsh")
    assert exact <= lipschitz(G, "power") <= exact * 1.02


# --- Algorithm 1 properties -----------------------------------------------------------------

@pytest.mark.parametrize("warm", ["wanda", "sparsegpt", "magnitude"])
@pytest.mark.parametrize("target", [Unstructured(0.5), NM(2, 4)], ids=str)
def test_error_never_worse_than_warm_start(warm: str, target) -> None:
    for seed in range(3):
        p = make_problem(out=16, width=32, tokens=256, seed=seed)
        ctx = SolveContext()
        module = WARM[warm]
        start = module.prune(p["W"], LinearStats(gram=p["stats"].gram, count=256), target,
                             module.SPEC.make_config(), ctx)
        result = solve(p, target, warm_start=warm, momentum="paper" if seed == 2 else "standard")
        assert dense_error(p, result.weight) <= dense_error(p, start.weight) * (1 + 1e-5)
        assert result.info["final_error"] <= result.info["warm_start_error"]


@pytest.mark.parametrize("sparsity", [0.5, 0.7])
def test_exact_unstructured_sparsity(sparsity: float) -> None:
    p = make_problem(out=16, width=40, tokens=256, seed=4)
    result = solve(p, Unstructured(sparsity))
    pruned = int(p["W"].numel() * sparsity)
    assert int((~result.keep_mask).sum()) == pruned
    assert int((result.weight == 0).sum()) >= pruned
    assert not bool(result.weight[~result.keep_mask].any())


@pytest.mark.parametrize("target", [NM(2, 4), NM(4, 8)], ids=str)
def test_nm_pattern_is_valid(target: NM) -> None:
    p = make_problem(out=16, width=32, tokens=256, seed=5)
    result = solve(p, target, warm_start="sparsegpt")
    assert nm_violations(result.keep_mask, target) == 0
    assert nm_violations(result.weight != 0, target) == 0


def test_lambda_bisection_update_rule() -> None:
    search = fista.LambdaBisection(lam=1e-5, low=0.0, high=1e6, xi=0.3)
    search.update(0.5)  # rounding dominates the error: FISTA was not sparse enough, raise λ
    assert (search.low, search.high) == (1e-5, 1e6) and search.lam == pytest.approx(5e5)
    search.update(0.1)  # enough sparsity: lower λ
    assert search.high == pytest.approx(5e5) and search.lam == pytest.approx((1e-5 + 5e5) / 2)
    geometric = fista.LambdaBisection(lam=1e-5, low=0.0, high=1e6, xi=0.3, geometric=True, floor=1e-5)
    geometric.update(0.9)
    assert geometric.lam == pytest.approx(math.sqrt(1e-5 * 1e6))


def test_lambda_moves_the_way_the_ratio_asks() -> None:
    p = make_problem(out=16, width=32, tokens=256, seed=6)
    rising, falling = [], []
    solve(p, Unstructured(0.5), rising)  # λ₀ = 1e-5: FISTA stays dense, rounding dominates
    solve(p, Unstructured(0.5), falling, lam_init=9e5)  # huge λ: all zero, E_round = 0
    up = [e for e in rising if isinstance(e, LambdaStep)]
    down = [e for e in falling if isinstance(e, LambdaStep)]
    assert up[0].ratio > 0.3 and up[1].lam > up[0].lam
    assert down[0].sparsity_before_rounding == 1.0 and down[0].ratio <= 0.3 and down[1].lam < down[0].lam
    for steps in (up, down):
        for before, after in itertools.pairwise(steps):
            assert (after.lam > before.lam) == (before.ratio > before.xi)


def test_events_in_order() -> None:
    p = make_problem(out=8, width=16, tokens=128, seed=7)
    events: list = []
    result = solve(p, NM(2, 4), events, bisection="geometric")
    lam_steps = [e for e in events if isinstance(e, LambdaStep)]
    solver_steps = [e for e in events if isinstance(e, SolverStep)]
    assert [e.round for e in lam_steps] == list(range(result.info["rounds"]))
    assert all(e.layer == 2 and e.name == "mlp.up_proj" and e.xi == 0.3 for e in lam_steps)
    assert all(e.lam_low <= e.lam <= e.lam_high for e in lam_steps)
    assert [e.step for e in solver_steps] == list(range(result.info["fista_steps"]))
    assert all(e.solver == "fista" and math.isfinite(e.objective) for e in solver_steps)
    assert {e.values["round"] for e in solver_steps} == {float(e.round) for e in lam_steps}
    quiet: list = []
    solve(p, NM(2, 4), quiet, trace_every=0)
    assert not [e for e in quiet if isinstance(e, SolverStep)]


def test_cancellation_is_checked_every_round() -> None:
    p = make_problem(out=4, width=8, tokens=64, seed=8)
    ctx = SolveContext(cancelled=lambda: True)
    with pytest.raises(RunCancelled):
        fista.prune(p["W"], p["stats"], Unstructured(0.5), fista.FistaConfig(), ctx)


@pytest.mark.parametrize(
    "options",
    [{"xi": 0.0}, {"xi": 1.0}, {"fista_iters": 0}, {"patience": 0}, {"eps": 0.0}, {"lam_low": 2.0, "lam_high": 1.0},
     {"lam_init": 2e6}, {"lam_high": float("inf")}, {"trace_every": -1}, {"warm_start": "thanos"},
     {"momentum": "nesterov"}, {"inner_tol": -1.0}],
)
def test_bad_options_raise(options: dict) -> None:
    with pytest.raises(ToolkitError):
        get_method("fista").make_config(options)


def test_bad_targets_and_stats_raise() -> None:
    p = make_problem(out=4, width=6, tokens=64, seed=9)
    with pytest.raises(ToolkitError, match="n:m"):
        solve(p, NM(2, 4))  # 6 inputs are not a multiple of 4
    with pytest.raises(ToolkitError, match="structured"):
        solve(p, Structured(0.5))
    bad = p["stats"].gram.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(NumericalError, match="non-finite"):
        fista.prune(p["W"], LinearStats(gram=bad, count=64), Unstructured(0.5), fista.FistaConfig(), SolveContext())


def test_dead_inputs_warn_and_return_the_warm_start() -> None:
    W = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    zero = torch.zeros(8, 8)
    events: list = []
    ctx = SolveContext(emit=events.append)
    result = fista.prune(W, LinearStats(gram=zero, count=10, cross=zero, dense_gram=zero), Unstructured(0.5),
                         fista.FistaConfig(), ctx)
    warnings = [e for e in events if isinstance(e, RunWarning)]
    assert len(warnings) == 1 and "warm start" in warnings[0].message
    assert result.info["chosen"] == "warm_start" and bool(torch.isfinite(result.weight).all())
    assert int((~result.keep_mask).sum()) == 16


def test_missing_cross_falls_back_once() -> None:
    p = make_problem(out=4, width=8, tokens=64, seed=10)
    events: list = []
    ctx = SolveContext(emit=events.append)
    result = fista.prune(p["W"], LinearStats(gram=p["stats"].gram, count=64), Unstructured(0.5),
                         fista.FistaConfig(), ctx)
    warnings = [e.message for e in events if isinstance(e, RunWarning)]
    assert len(warnings) == 1 and "stats.cross" in warnings[0] and "error correction is off" in warnings[0]
    assert result.info["error_correction"] is False


def test_inputs_are_not_mutated() -> None:
    p = make_problem(out=8, width=16, tokens=64, seed=11)
    before = [t.clone() for t in (p["W"], p["stats"].gram, p["stats"].cross, p["stats"].dense_gram)]
    for warm in WARM:
        solve(p, Unstructured(0.5), warm_start=warm)
    after = (p["W"], p["stats"].gram, p["stats"].cross, p["stats"].dense_gram)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_correlated_inputs_fista_beats_sparsegpt_beats_magnitude() -> None:
    _, stats = correlated_stats(256, tokens=1024, seed=12)
    W = torch.randn(64, 256, generator=torch.Generator().manual_seed(12))
    target, ctx = Unstructured(0.5), SolveContext()
    mag = magnitude.prune(W, stats, target, magnitude.MagnitudeConfig(), ctx)
    sgpt = sparsegpt.prune(W, stats, target, sparsegpt.SparseGPTConfig(), ctx)
    paper = fista.prune(W, stats, target, fista.FistaConfig(warm_start="sparsegpt"), ctx)
    errors = [reconstruction_errors(W, r.weight, stats)[0] for r in (paper, sgpt, mag)]
    assert errors[0] <= errors[1] * (1 + 1e-6) and errors[1] < errors[2]
    # the paper's arithmetic bisection jumps from λ₀ to 5e5 and spends T on over-sparse rounds here;
    # geometric midpoints with more patience find the λ where the rounded FISTA solution wins
    tuned_cfg = fista.FistaConfig(warm_start="sparsegpt", bisection="geometric", max_rounds=100, patience=10)
    tuned = fista.prune(W, stats, target, tuned_cfg, ctx)
    assert tuned.info["chosen"] == "fista"
    assert reconstruction_errors(W, tuned.weight, stats)[0] < 0.9 * errors[1]


def test_error_correction_targets_the_dense_output() -> None:
    p = make_problem(out=16, width=32, tokens=512, seed=13, shift=0.5)
    corrected = solve(p, Unstructured(0.5), warm_start="sparsegpt", bisection="geometric")
    plain = solve(p, Unstructured(0.5), warm_start="sparsegpt", bisection="geometric", error_correction=False)
    assert corrected.info["error_correction"] and not plain.info["error_correction"]
    assert dense_error(p, corrected.weight) < dense_error(p, plain.weight)
    assert corrected.info["final_error"] == pytest.approx(dense_error(p, corrected.weight), rel=1e-4)


def test_lambda_units() -> None:
    p = make_problem(out=8, width=16, tokens=100, seed=14)
    by_sum, by_mean = [], []
    solve(p, Unstructured(0.5), by_sum, lam_init=50.0, trace_every=0)
    solve(p, Unstructured(0.5), by_mean, lam_init=0.5, lam_units="mean", trace_every=0)
    first_sum = next(e for e in by_sum if isinstance(e, LambdaStep))
    first_mean = next(e for e in by_mean if isinstance(e, LambdaStep))
    # λ_sum = N·λ_mean gives the same threshold, hence the same first round
    assert first_sum.e_total == pytest.approx(first_mean.e_total, rel=1e-5)
    assert first_sum.lam == 50.0 and first_mean.lam == 0.5


def test_through_the_engine_on_a_tiny_llama() -> None:
    from toolkit.data.text import CalibSpec, calibration_windows
    from toolkit.engine.prune import prune_layers
    from toolkit.engine.state import EngineConfig
    from toolkit.events import SublayerPruned
    from toolkit.models.load import load_model

    model = load_model("tiny-llama").model
    tokens = torch.randint(0, 256, (2000,), generator=torch.Generator().manual_seed(0))
    spec = get_method("fista")
    events: list = []
    prune_layers(model, calibration_windows(tokens, CalibSpec("x", 4, 32, 0)), spec, NM(2, 4),
                 spec.make_config({"trace_every": 0}), cfg=EngineConfig(batch_size=2), emit=events.append)
    pruned = [e for e in events if isinstance(e, SublayerPruned)]
    assert pruned and all(e.sparsity == pytest.approx(0.5) for e in pruned)
    assert any(isinstance(e, LambdaStep) for e in events)
    assert not [e for e in events if isinstance(e, RunWarning)]
    for e in pruned:  # the solver's error is the engine's dense-target error, never above the warm start's
        assert e.info["error_correction"]
        assert e.rel_error_dense == pytest.approx(e.info["final_error"], rel=1e-3, abs=1e-6)
        assert e.info["final_error"] <= e.info["warm_start_error"]
