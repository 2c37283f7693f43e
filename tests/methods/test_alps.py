"""ALPS: hand cases, a brute-force optimum on tiny matrices, the baselines it must beat, patterns, bad input."""

from __future__ import annotations

import dataclasses
import itertools
import statistics

import pytest
import torch

from tests.helpers.stats import correlated_stats
from toolkit.data.text import CalibSpec, calibration_windows
from toolkit.engine.prune import prune_layers
from toolkit.engine.solve import reconstruction_errors
from toolkit.engine.state import EngineConfig
from toolkit.errors import NumericalError, RunCancelled, ToolkitError
from toolkit.events import RunWarning, SolverStep
from toolkit.methods import alps, get_method
from toolkit.methods.base import LinearStats, SolveContext
from toolkit.methods.masks import nm_violations
from toolkit.models.load import load_model
from toolkit.spec.compression import Compression
from toolkit.spec.targets import NM, Structured, Target, Unstructured

TARGETS = (Unstructured(0.5), Unstructured(0.7), NM(2, 4), NM(4, 8))


def _solve(name: str, W: torch.Tensor, stats: LinearStats, target: Target, events: list | None = None,
           **options: object):
    spec = get_method(name)
    ctx = SolveContext(layer=1, name="mlp.up_proj", emit=events.append if events is not None else lambda e: None)
    return spec.fn(W, stats, target, spec.make_config(options), ctx)


def _error(W: torch.Tensor, A: torch.Tensor, G: torch.Tensor) -> float:
    """‖(A − W) X‖/‖W X‖ in float64 from the Gram."""
    d = (A - W).double()
    return float(((d @ G.double()) * d).sum() / ((W.double() @ G.double()) * W.double()).sum()) ** 0.5


# --- hand cases -----------------------------------------------------------------------------

def test_orthogonal_inputs_keep_the_largest_weights_unchanged() -> None:
    # G = I: the error is ‖Ŵ − W‖², so the optimum keeps the largest |W| and moves nothing
    W = torch.tensor([[0.1, -0.8, 0.3, -0.05, 0.6, 0.2, -0.4, 0.7]])
    result = _solve("alps", W, LinearStats(torch.eye(8), 10), Unstructured(0.5))
    assert result.keep_mask.tolist() == [[False, True, False, False, True, False, True, True]]
    assert torch.allclose(result.weight, W * result.keep_mask, atol=1e-6)


def test_correlated_pair_keeps_one_weight_and_compensates() -> None:
    # W = [1, 0.5], G = [[1, .9], [.9, 1]]. Keeping w0 alone: w0' = (W G)_0 / G_00 = 1.45, error² = 2.15 − 1.45² =
    # 0.0475; keeping w1 alone: w1' = 1.4, error² = 0.19. The optimum keeps w0 and moves it to 1.45.
    W, G = torch.tensor([[1.0, 0.5]]), torch.tensor([[1.0, 0.9], [0.9, 1.0]])
    result = _solve("alps", W, LinearStats(G, 10), Unstructured(0.5), damp_frac=0.0)
    assert result.keep_mask.tolist() == [[True, False]]
    assert torch.allclose(result.weight, torch.tensor([[1.45, 0.0]]), atol=1e-4)
    assert _error(W, result.weight, G) == pytest.approx((0.0475 / 2.15) ** 0.5, rel=1e-3)


# --- against the exact optimum ----------------------------------------------------------------

def _problem(shape: tuple[int, int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """W (out, in) and the Gram of 64 correlated tokens with uneven column norms."""
    gen = torch.Generator().manual_seed(seed)
    width = shape[1]
    X = torch.randn(64, width, generator=gen) * torch.exp(0.5 * torch.randn(width, generator=gen))
    X = X + 0.5 * X @ torch.randn(width, width, generator=gen) / width**0.5
    return torch.randn(*shape, generator=gen), X.T @ X / 64


def _supports(shape: tuple[int, int], target: Unstructured | NM):
    """Every keep-mask of ``shape`` meeting ``target`` (C(12, 6) = 924 for 2 × 6 at 50 %)."""
    rows, width = shape
    if isinstance(target, NM):
        choices = list(itertools.combinations(range(target.m), target.n))
        row_masks = []
        for combo in itertools.product(choices, repeat=width // target.m):
            keep = torch.zeros(width, dtype=torch.bool)
            for group, kept in enumerate(combo):
                keep[[group * target.m + j for j in kept]] = True
            row_masks.append(keep)
        yield from (torch.stack(masks) for masks in itertools.product(row_masks, repeat=rows))
        return
    kept = rows * width - int(rows * width * target.sparsity)
    for chosen in itertools.combinations(range(rows * width), kept):
        keep = torch.zeros(rows * width, dtype=torch.bool)
        keep[list(chosen)] = True
        yield keep.view(rows, width)


def _optimum(W: torch.Tensor, G: torch.Tensor, target: Unstructured | NM) -> float:
    """The smallest error over all supports, each with its exact least squares per row (float64)."""
    W64, G64 = W.double(), G.double()
    best = float("inf")
    for keep in _supports((W.shape[0], W.shape[1]), target):
        A = torch.zeros_like(W64)
        for r in range(W.shape[0]):
            cols = keep[r].nonzero().flatten()
            if len(cols):
                A[r, cols] = torch.linalg.solve(G64[cols][:, cols], (W64[r] @ G64)[cols])
        best = min(best, _error(W64, A, G64))
    return best


@pytest.mark.parametrize(("shape", "target"), [((1, 6), Unstructured(0.5)), ((2, 6), Unstructured(0.5)),
                                               ((1, 8), NM(2, 4))], ids=str)
def test_within_a_small_factor_of_the_brute_force_optimum(shape: tuple[int, int], target: Unstructured | NM) -> None:
    ratios, sparsegpt = [], []
    for seed in range(8):
        W, G = _problem(shape, seed)
        optimum = _optimum(W, G, target)
        stats = LinearStats(G, 64)
        ratios.append(_error(W, _solve("alps", W, stats, target).weight, G) / optimum)
        sparsegpt.append(_error(W, _solve("sparsegpt", W, stats, target).weight, G) / optimum)
    assert min(ratios) >= 1 - 1e-4, "no feasible support beats the exhaustive optimum"
    assert max(ratios) < 1.5, ratios
    assert statistics.median(ratios) < 1.02, ratios  # most tiny problems are solved exactly
    assert sum(ratios) < sum(sparsegpt), (ratios, sparsegpt)


@pytest.mark.parametrize("target", TARGETS, ids=str)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_error_at_most_sparsegpt_and_wanda(target: Target, seed: int) -> None:
    _, stats = correlated_stats(64, tokens=512, seed=seed)
    W = torch.randn(32, 64, generator=torch.Generator().manual_seed(100 + seed))
    errors = {name: reconstruction_errors(W, _solve(name, W, stats, target).weight, stats)[0]
              for name in ("alps", "sparsegpt", "wanda")}
    assert errors["alps"] <= errors["sparsegpt"] * 1.001, errors
    assert errors["alps"] <= errors["wanda"] * 1.001, errors


# --- properties --------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS, ids=str)
def test_exact_sparsity_pattern_and_inputs_unchanged(target: Unstructured | NM) -> None:
    _, stats = correlated_stats(64, tokens=256, seed=3)
    W = torch.randn(16, 64, generator=torch.Generator().manual_seed(7))
    before_w, before_g = W.clone(), stats.gram.clone()
    result = _solve("alps", W, stats, target)
    assert torch.equal(W, before_w) and torch.equal(stats.gram, before_g), "inputs must not be mutated"
    assert result.weight.dtype == torch.float32 and bool(result.weight.isfinite().all())
    assert bool((result.weight[~result.keep_mask] == 0).all())
    zeros = int((~result.keep_mask).sum())
    if isinstance(target, NM):
        assert nm_violations(result.keep_mask, target) == 0
        assert zeros == W.numel() * (target.m - target.n) // target.m
    else:
        assert zeros == int(W.numel() * target.sparsity)  # one threshold over the whole matrix


def test_events_carry_rho_residuals_and_support_changes() -> None:
    _, stats = correlated_stats(64, tokens=512, seed=0)
    W = torch.randn(32, 64, generator=torch.Generator().manual_seed(5))
    events: list = []
    result = _solve("alps", W, stats, Unstructured(0.5), events)
    steps = [e for e in events if isinstance(e, SolverStep)]
    admm = [s for s in steps if s.values["round"] == 0.0]
    refine = [s for s in steps if s.values["round"] == 1.0]
    assert admm and all(s.solver == "alps" and (s.layer, s.name) == (1, "mlp.up_proj") for s in steps)
    assert all({"rho", "primal", "dual", "support_change"} <= set(s.values) for s in admm)
    assert [s.step for s in steps] == sorted({s.step for s in steps}), "one step axis, ADMM then PCG"
    assert admm[-1].values["support_change"] < admm[0].values["support_change"]
    assert max(s.values["rho"] for s in admm) > admm[0].values["rho"], "the penalty goes up"
    assert result.info["stop_reason"] == "support_stable" and result.info["admm_iters"] == admm[-1].step
    assert len(refine) == result.info["pcg_steps"] and refine[-1].objective <= admm[-1].objective + 1e-6
    assert result.info["final_error"] <= result.info["admm_error"] + 1e-6


def test_pcg_solves_the_restricted_least_squares() -> None:
    # enough PCG steps give the exact least squares on the chosen support: the gradient vanishes there
    _, stats = correlated_stats(32, tokens=256, seed=1)
    W = torch.randn(8, 32, generator=torch.Generator().manual_seed(2))
    result = _solve("alps", W, stats, NM(2, 4), pcg_iters=200, pcg_tol=1e-7, damp_frac=0.0)
    gradient = (result.weight - W) @ stats.gram  # (out, in): ∂/∂Ŵ ½‖(Ŵ − W)X‖²/N
    assert float(gradient[result.keep_mask].abs().max()) < 1e-3 * float((W @ stats.gram).abs().max())


# --- singular statistics and bad input -----------------------------------------------------------

def test_dead_inputs_give_finite_weights_and_are_reported() -> None:
    X, _ = correlated_stats(16, tokens=64, seed=4)
    X[:, [0, 5, 9]] = 0.0  # three inputs that never fire: zero rows and columns of G
    stats = LinearStats(X.T @ X / 64, 64)
    W = torch.randn(8, 16, generator=torch.Generator().manual_seed(0))
    events: list = []
    result = _solve("alps", W, stats, Unstructured(0.5), events)
    assert bool(result.weight.isfinite().all())
    assert not result.keep_mask[:, [0, 5, 9]].any(), "weights on dead inputs are pruned first"
    assert result.info["dead_inputs"] == 3 and result.damping == pytest.approx(0.01)
    assert any(isinstance(e, RunWarning) and "3 of 16 inputs" in e.message for e in events)


@pytest.mark.parametrize("damp_frac", [0.0, 0.01])
def test_rank_deficient_gram_stays_finite(damp_frac: float) -> None:
    X = torch.randn(4, 24, generator=torch.Generator().manual_seed(1))  # 4 tokens: G has rank 4 of 24
    stats = LinearStats(X.T @ X / 4, 4)
    result = _solve("alps", torch.randn(6, 24), stats, NM(2, 4), damp_frac=damp_frac)
    assert bool(result.weight.isfinite().all()) and nm_violations(result.keep_mask, NM(2, 4)) == 0


def test_all_inputs_dead_gives_zeros() -> None:
    result = _solve("alps", torch.randn(4, 8), LinearStats(torch.zeros(8, 8), 16), Unstructured(0.5))
    assert bool((result.weight == 0).all()) and int((~result.keep_mask).sum()) == 16


@pytest.mark.parametrize(("options", "message"), [
    ({"rho": "0"}, "rho > 0"), ({"rho": "-1"}, "rho > 0"), ({"rho": "nan"}, "rho > 0"),
    ({"max_iters": "0"}, "max_iters ≥ 1"), ({"pcg_iters": "-1"}, "pcg_iters ≥ 0"),
    ({"update_every": "0"}, "update_every ≥ 1"), ({"damp_frac": "-0.1"}, "damp_frac in"),
    ({"pcg_tol": "0"}, "pcg_tol > 0"), ({"rho_max": "0.01"}, "rho_max ≥ rho"),
])
def test_bad_options_raise_one_line(options: dict, message: str) -> None:
    with pytest.raises(ToolkitError, match=message) as info:
        get_method("alps").make_config(options)
    assert "\n" not in str(info.value)


def test_structured_target_and_bad_statistics_are_refused() -> None:
    with pytest.raises(ToolkitError, match="alps supports unstructured"):
        get_method("alps").check(Compression(sparsity=Structured(0.3)))
    gram = torch.eye(8)
    gram[2, 2] = float("nan")
    with pytest.raises(NumericalError, match="non-finite"):
        _solve("alps", torch.randn(4, 8), LinearStats(gram, 16), Unstructured(0.5))
    with pytest.raises(ToolkitError, match="divisible by 4"):
        _solve("alps", torch.randn(4, 6), LinearStats(torch.eye(6), 16), NM(2, 4))


def test_cancellation_stops_the_solve() -> None:
    _, stats = correlated_stats(16, tokens=64, seed=0)
    ctx = SolveContext(cancelled=lambda: True)
    with pytest.raises(RunCancelled):
        alps.prune(torch.randn(4, 16), stats, Unstructured(0.5), alps.AlpsConfig(), ctx)


# --- on a tiny model: both solvers on the statistics the engine gathers for each linear ---------------

@pytest.mark.parametrize("family", ["llama", "opt"])
@pytest.mark.parametrize("target", [Unstructured(0.5), NM(2, 4)], ids=str)
def test_per_linear_error_at_most_sparsegpt_on_a_tiny_model(family: str, target: Target) -> None:
    errors: dict[tuple[int, str], tuple[float, float]] = {}

    def both(W: torch.Tensor, stats: LinearStats, target: Target | None, cfg: object, ctx: SolveContext):
        assert target is not None
        ours = alps.prune(W, stats, target, alps.AlpsConfig(), ctx)
        theirs = _solve("sparsegpt", W, stats, target)
        errors[(ctx.layer, ctx.name)] = (reconstruction_errors(W, ours.weight, stats)[0],
                                         reconstruction_errors(W, theirs.weight, stats)[0])
        return ours

    spec = dataclasses.replace(alps.SPEC, fn=both)
    tokens = torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(1))
    windows = calibration_windows(tokens, CalibSpec("x", 4, 32, 0))
    prune_layers(load_model(f"tiny-{family}").model, windows, spec, target, alps.AlpsConfig(),
                 emit=lambda e: None, cfg=EngineConfig(batch_size=2))
    assert len(errors) >= 8
    worse = {key: pair for key, pair in errors.items() if pair[0] > pair[1] * 1.001}
    assert not worse, worse
