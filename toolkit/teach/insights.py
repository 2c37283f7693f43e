"""What a learner would ask about a run's figures, found in the run's own numbers and phrased (no torch).

The "how to read this" texts (:mod:`app.howto`) say what a figure shows in general; these detectors
say what *this* run shows, computed from its events, never written in by hand:

- :func:`layer_error_jumps` finds a large change of the layer output error
  e_ℓ = ‖f̂_ℓ(x) − f_ℓ(x)‖ / ‖f_ℓ(x)‖ between consecutive decoder layers, i.e. a ratio
  e_ℓ / e_(ℓ+1) ≥ ``factor`` (a drop) or e_(ℓ+1) / e_ℓ ≥ ``factor`` (a rise);
  :func:`describe_layer_jumps` phrases them for one run or several, and says when every method
  shows the same jump: then it is a property of the model (the size of its residual stream at that
  layer), not of the pruning method.
- :func:`lambda_summary` reads FISTAPruner's λ bisection (LambdaStep): in how many rounds
  E_round / E_total exceeded ξ (the rounding did most of the damage, so the bisection raised λ to
  ask FISTA for sparsity before rounding), and how sparse FISTA's solution was before rounding;
  :func:`describe_lambda` phrases it (whether the ℓ1 term ever engaged).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from toolkit.events import LambdaStep

JUMP_FACTOR = 5.0  # a change of the layer output error by at least this factor between two layers is worth a word
NEAR = 1  # jumps of different runs at most this many layers apart are the same place in the model
ENGAGED = 0.01  # FISTA's solution counts as sparse before rounding above this fraction of exact zeros


@dataclass(frozen=True, slots=True)
class Jump:
    """The layer output error changes by ``factor`` from layer ``layer`` to ``layer + 1`` (``drop`` or ``rise``)."""

    layer: int
    before: float
    after: float

    @property
    def factor(self) -> float:
        """max(before, after) / min(before, after): how many times larger the larger side is."""
        return max(self.before, self.after) / min(self.before, self.after)

    @property
    def direction(self) -> str:
        """"drop" when the error falls from ``layer`` to the next, "rise" otherwise."""
        return "drop" if self.after < self.before else "rise"


def layer_error_jumps(errors: Sequence[float | None], factor: float = JUMP_FACTOR) -> list[Jump]:
    """Consecutive decoder layers whose output errors differ by at least ``factor`` (in either direction).

    ``errors[ℓ]`` is e_ℓ of decoder layer ℓ (0-based); a pair with a non-finite or non-positive value
    is skipped. Raises ValueError for ``factor`` ≤ 1 (every pair would qualify).
    """
    if not factor > 1:
        raise ValueError(f"factor must be > 1, got {factor}")
    jumps = []
    for layer, (before, after) in enumerate(itertools.pairwise(errors)):
        if before is None or after is None or not (_usable(before) and _usable(after)):  # None: not measured
            continue
        if max(before, after) / min(before, after) >= factor:
            jumps.append(Jump(layer, float(before), float(after)))
    return jumps


def _usable(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _clusters(jumps: Mapping[str, Sequence[Jump]], near: int) -> list[tuple[str, int, int]]:
    """(direction, first layer, last layer) of the jumps of all runs, grouped when at most ``near`` layers apart."""
    out: list[tuple[str, int, int]] = []
    for direction in ("drop", "rise"):
        for layer in sorted({j.layer for found in jumps.values() for j in found if j.direction == direction}):
            if out and out[-1][0] == direction and layer - out[-1][2] <= near:
                out[-1] = (direction, out[-1][1], layer)
            else:
                out.append((direction, layer, layer))
    return out


def describe_layer_jumps(errors_by_run: Mapping[str, Sequence[float | None]], factor: float = JUMP_FACTOR,
                         near: int = NEAR) -> str:
    """One or two sentences on the large jumps of the layer output error, for one run or several.

    Jumps of different runs at most ``near`` layers apart count as the same place. When every run
    (at least two) jumps at the same place in the same direction, the sentence says it is the
    model's doing, not the method's. Returns "" when no run has a jump.
    """
    jumps = {label: layer_error_jumps(errors, factor) for label, errors in errors_by_run.items()}
    if not any(jumps.values()):
        return ""
    sentences, shared_jumps = [], set()
    subject = "every run" if len(jumps) > 1 else "this run"
    for direction, first, last in _clusters(jumps, near):
        members = {label: [j for j in found if j.direction == direction and first <= j.layer <= last]
                   for label, found in jumps.items()}
        if not all(members.values()):
            continue
        shared_jumps.update((label, j.layer) for label, found in members.items() for j in found)
        verb = "drops" if direction == "drop" else "rises"
        sizes = [j.factor for found in members.values() for j in found]
        if first == last:
            low, high = min(sizes), max(sizes)
            span = f"×{low:.0f}" if round(low) == round(high) else f"×{low:.0f}–×{high:.0f}"
            sentences.append(f"The layer output error {verb} {span} from layer {first} to layer {last + 1} in "
                             f"{subject}.")
        else:
            each = ", ".join(f"{label} ×{j.factor:.0f} after layer {j.layer}"
                             for label, found in members.items() for j in found)
            sentences.append(f"The layer output error {verb} sharply between layers {first} and {last + 1} in "
                             f"{subject} ({each}).")
    if shared_jumps and len(jumps) > 1:
        sentences.append("Since every method shows it, it is a property of the model, not of the pruning: "
                         "the error is relative to the layer's output, and where the residual stream grows "
                         "(a few very large hidden-state values) the same absolute damage is a much smaller "
                         "fraction of it.")
    for label, found in jumps.items():
        own = [j for j in found if (label, j.layer) not in shared_jumps]
        if own:
            listed = ", ".join(f"{j.direction} ×{j.factor:.0f} after layer {j.layer}" for j in own)
            sentences.append(f"{label}: {listed}.")
    return " ".join(sentences)


@dataclass(frozen=True, slots=True)
class LambdaSummary:
    """FISTAPruner's λ bisection over a run's linears (from its LambdaStep events)."""

    linears: int
    rounds: int
    raised: int  # rounds with E_round / E_total > ξ: the bisection asked for more sparsity before rounding
    max_sparsity_before_rounding: float
    mean_sparsity_before_rounding: float
    kept_sparsity_before_rounding: float  # the sparsest FISTA solution among rounds that improved the best error
    lam_min: float
    lam_max: float
    xi: float

    @property
    def engaged(self) -> bool:
        """True when the ℓ1 term made FISTA's solution sparse before rounding in some round."""
        return self.max_sparsity_before_rounding > ENGAGED


def lambda_summary(steps: Sequence[LambdaStep]) -> LambdaSummary | None:
    """Counts and ranges over every LambdaStep of a run; None without any (not a FISTAPruner run)."""
    if not steps:
        return None
    before = [s.sparsity_before_rounding for s in steps if math.isfinite(s.sparsity_before_rounding)]
    lams = [s.lam for s in steps if math.isfinite(s.lam)]
    return LambdaSummary(
        linears=len({(s.layer, s.name) for s in steps}), rounds=len(steps),
        raised=sum(1 for s in steps if math.isfinite(s.ratio) and s.ratio > s.xi),
        max_sparsity_before_rounding=max(before, default=math.nan),
        mean_sparsity_before_rounding=sum(before) / len(before) if before else math.nan,
        kept_sparsity_before_rounding=max((s.sparsity_before_rounding for s in steps
                                           if s.improved and math.isfinite(s.sparsity_before_rounding)),
                                          default=math.nan),
        lam_min=min(lams, default=math.nan), lam_max=max(lams, default=math.nan), xi=steps[0].xi)


def describe_lambda(summary: LambdaSummary | None) -> str:
    """Whether the λ bisection ever needed sparsity before rounding, and what that means; "" without a summary."""
    if summary is None:
        return ""
    head = (f"Over {summary.linears} linears and {summary.rounds} rounds, λ ran from {summary.lam_min:.3g} to "
            f"{summary.lam_max:.3g}; E_round/E_total exceeded ξ = {summary.xi:g} in {summary.raised} rounds. ")
    if summary.raised == 0:
        return head + ("The bisection never needed sparsity before rounding: rounding the FISTA solution to the "
                       "target cost little of the error every time, so λ only went down and the ℓ1 term stayed "
                       f"too weak to zero weights (at most {summary.max_sparsity_before_rounding:.1%} zeros before "
                       "rounding). FISTA acted as a least-squares refinement of the warm start and the magnitude "
                       "rounding chose the mask.")
    if not summary.engaged:
        return head + ("λ was raised, but FISTA's solution still had at most "
                       f"{summary.max_sparsity_before_rounding:.1%} zeros before rounding: λ/L stayed too small "
                       "against the weights for the soft-threshold to zero them.")
    kept = summary.kept_sparsity_before_rounding
    if math.isfinite(kept) and kept > ENGAGED:
        return head + (f"The ℓ1 term engaged: up to {summary.max_sparsity_before_rounding:.1%} of the weights were "
                       f"already zero before rounding, and a round that improved the error had {kept:.1%}, so the "
                       "mask is partly FISTA's own choice.")
    return head + (f"The ℓ1 term engaged (up to {summary.max_sparsity_before_rounding:.1%} zeros before rounding), "
                   "but no round with a sparse FISTA solution improved the error: the kept solutions came from "
                   "rounds where λ was small, and the magnitude rounding chose the mask.")
