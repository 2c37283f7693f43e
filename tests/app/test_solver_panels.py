"""The FISTAPruner convergence and λ panels always show the same linear, whatever the event order."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from app import views
from tests.helpers.synthetic_runs import run_events
from toolkit.events import BlockStep, LambdaStep, SolverStep
from toolkit.live.solver import solver_snapshot
from toolkit.live.view import RunView

LINEAR = re.compile(r"layer (\d+) · ([\w.]+)")


def linear_of(fig: object) -> tuple[str, str] | None:
    found = LINEAR.search(fig.layout.title.text or "")  # type: ignore[attr-defined]
    return found.groups() if found else None


def shuffled_solver_events(seed: int) -> list:
    """A fista run whose solver, λ and block steps interleave differently per seed (each kind stays in order)."""
    rng = random.Random(seed)
    events = run_events("r", layers=2)
    head = [e for e in events if not isinstance(e, SolverStep | LambdaStep | BlockStep)][:2]
    traced = [e for e in events if isinstance(e, SolverStep | LambdaStep | BlockStep)]
    out = list(head)
    for _, group in itertools.groupby(traced, key=lambda e: (e.layer, e.name)):
        steps = list(group)
        lambdas = [e for e in steps if isinstance(e, LambdaStep)]
        others = [e for e in steps if not isinstance(e, LambdaStep)]
        merged = []
        while lambdas or others:  # a random merge, each kind in its own order
            pool = lambdas if lambdas and (not others or rng.random() < 0.3) else others
            merged.append(pool.pop(0))
        out += merged
    return out


@pytest.mark.parametrize("seed", range(4))
def test_both_panels_name_the_same_linear_after_every_event(seed: int) -> None:
    events = run_events("r", layers=2) if seed == 0 else shuffled_solver_events(seed)
    view, sent = RunView(), None
    for index, event in enumerate(events):
        view.apply(event, float(index))
        update, sent = views.render(view, float(index), sent, figures=("solver",))  # a tick with room for one
        assert ("solver" in update) == ("lambda" in update), f"event {index}: only one solver panel redrawn"
        both, snap = views.solver_figures(view), solver_snapshot(view)
        if snap.layer >= 0:  # once anything is traced, both titles name the snapshot's linear
            named = (str(snap.layer), snap.name)
            assert linear_of(both["solver"]) == named, f"event {index} ({event.kind})"
            if snap.solver or snap.lambdas:  # a λ panel (FISTAPruner; not a block-only solve)
                assert linear_of(both["lambda"]) == named, f"event {index} ({event.kind})"
        if "solver" in update:
            assert linear_of(update["solver"]) == linear_of(update["lambda"]) or (not snap.lambdas and not snap.solver)


def test_first_round_of_a_new_linear_shows_no_stale_lambda() -> None:
    events = run_events("r", layers=1)
    first_of_second = next(i for i, e in enumerate(events) if isinstance(e, SolverStep) and e.name == "mlp.down_proj")
    view = RunView()
    for event in events[:first_of_second + 1]:
        view.apply(event)
    assert view.lambdas.name == "self_attn.q_proj"  # the folded λ trace is still the previous linear's
    snap = solver_snapshot(view)
    assert (snap.layer, snap.name, snap.lambdas) == (0, "mlp.down_proj", [])
    both = views.solver_figures(view)
    assert linear_of(both["solver"]) == linear_of(both["lambda"]) == ("0", "mlp.down_proj")
    assert "first λ round" in str(both["lambda"].layout.annotations[0].text)
