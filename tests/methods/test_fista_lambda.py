"""FISTAPruner's λ search: the paper's arithmetic bisection on [0, 1e6] against the bisection on log λ."""

from __future__ import annotations

import math

import pytest

from tests.methods.test_fista import make_problem, solve
from toolkit.errors import ToolkitError
from toolkit.events import LambdaStep
from toolkit.methods import fista, get_method
from toolkit.spec.targets import NM, Unstructured

SEARCHES = ("arithmetic", "geometric")


def lambda_steps(bisection: str, target=None, **options) -> tuple[list[LambdaStep], fista.PruneResult]:
    p = make_problem(out=16, width=32, tokens=64, seed=1)
    events: list = []
    result = solve(p, target or Unstructured(0.5), events, bisection=bisection, trace_every=0, **options)
    return [e for e in events if isinstance(e, LambdaStep)], result


def test_log_bisection_reaches_the_target_sparsity_within_the_rounds() -> None:
    """λ₀ = 1e-5 leaves FISTA dense; the paper's first raise (5e5) zeroes everything, and halving [1e-5, 5e5]
    four times never leaves the all-zero range. The log bisection's midpoints cross the target within the
    same five rounds, and its rounded solution has the lower error."""
    budget = {"max_rounds": 5, "patience": 10, "eps": 1e-12}
    paper, paper_result = lambda_steps("arithmetic", **budget)
    log, log_result = lambda_steps("geometric", **budget)
    assert len(paper) == len(log) == 5
    assert paper[0].sparsity_before_rounding < 0.5 and log[0].sparsity_before_rounding < 0.5
    assert paper[1].lam == pytest.approx(5e5) and log[1].lam == pytest.approx(math.sqrt(1e-5 * 1e6))
    assert all(e.sparsity_before_rounding == 1.0 for e in paper[1:])
    sparsities = [e.sparsity_before_rounding for e in log]
    assert max(sparsities) > 0.5 > min(sparsities)  # the target is bracketed
    assert min(abs(s - 0.5) for s in sparsities) < 0.15  # and approached
    assert log_result.info["final_error"] < paper_result.info["final_error"]


def test_log_bisection_bracket_and_midpoints() -> None:
    """The log bracket is [max(lam_low, lam_floor), lam_high]; every midpoint halves it in decades."""
    steps, _ = lambda_steps("geometric", max_rounds=5, patience=10, eps=1e-12, lam_floor=1e-8)
    assert steps[0].lam_low == pytest.approx(1e-8) and steps[0].lam_high == pytest.approx(1e6)
    for step in steps[1:]:
        assert step.lam == pytest.approx(math.sqrt(step.lam_low * step.lam_high), rel=1e-9)
        assert step.lam_low <= step.lam <= step.lam_high
    lowered = fista.LambdaBisection(lam=1e-5, low=1e-8, high=1e6, xi=0.3, geometric=True, floor=1e-8)
    lowered.update(0.1)  # FISTA sparse enough at λ₀: the next λ is the log midpoint of [1e-8, 1e-5]
    assert lowered.lam == pytest.approx(math.sqrt(1e-8 * 1e-5))


@pytest.mark.parametrize("bisection", SEARCHES)
@pytest.mark.parametrize("rounds", [1, 3, 7])
def test_both_searches_honour_the_rounds_budget(bisection: str, rounds: int) -> None:
    steps, result = lambda_steps(bisection, max_rounds=rounds, patience=100, eps=1e-12)
    assert len(steps) == result.info["rounds"] == rounds
    assert [e.round for e in steps] == list(range(rounds))


@pytest.mark.parametrize("bisection", SEARCHES)
def test_both_searches_keep_the_pattern_and_never_lose_to_the_warm_start(bisection: str) -> None:
    for target in (Unstructured(0.5), NM(2, 4)):
        _, result = lambda_steps(bisection, target)
        assert result.info["final_error"] <= result.info["warm_start_error"] * (1 + 1e-9)
        assert result.weight[~result.keep_mask].abs().sum() == 0


def test_the_paper_bisection_stays_the_default() -> None:
    assert fista.FistaConfig().bisection == "arithmetic"
    assert (fista.FistaConfig().lam_low, fista.FistaConfig().lam_high) == (0.0, 1e6)


@pytest.mark.parametrize(("options", "words"), [
    ({"bisection": "log"}, "option bisection of fista must be one of ['arithmetic', 'geometric'], got 'log'"),
    ({"lam_floor": 0.0}, "lam_floor must lie in (0, lam_high"),
    ({"lam_floor": 2e6}, "lam_floor must lie in (0, lam_high"),
    ({"bisection": "geometric", "lam_init": 1e-9}, "bisection=geometric needs lam_init ≥ lam_floor"),
])
def test_bad_search_options_raise_one_clear_line(options: dict, words: str) -> None:
    with pytest.raises(ToolkitError) as caught:
        get_method("fista").make_config(options)
    message = str(caught.value)
    assert words in message and "\n" not in message
