"""The detectors behind the data-driven notes of the "how to read this" panels, on synthetic runs."""

import math

import pytest

from toolkit.events import LambdaStep
from toolkit.teach.insights import describe_lambda, describe_layer_jumps, lambda_summary, layer_error_jumps


def _errors(drop_after: int, factor: float, layers: int = 16, noise: float = 0.0) -> list[float]:
    """A smooth rising error curve with a drop by ``factor`` after layer ``drop_after``."""
    out = []
    for layer in range(layers):
        value = 0.05 * (1 + 0.05 * layer) * (1 + noise * ((-1) ** layer))
        out.append(value / factor if layer > drop_after else value)
    return out


def test_a_thirtyfold_drop_is_found_at_its_layer():
    jumps = layer_error_jumps(_errors(11, 30.0))
    assert [(j.layer, j.direction) for j in jumps] == [(11, "drop")]
    assert jumps[0].factor == pytest.approx(30.0 * 1.55 / 1.6, rel=1e-9)


def test_smooth_curves_and_unusable_values_give_no_jump():
    assert layer_error_jumps(_errors(11, 1.0, noise=0.2)) == []
    assert layer_error_jumps([0.1, math.nan, 0.001, 0.0, 0.1]) == []  # every pair has a nan or a zero


def test_a_rise_is_reported_as_a_rise():
    jumps = layer_error_jumps([0.01, 0.012, 0.5, 0.51])
    assert [(j.layer, j.direction, round(j.factor)) for j in jumps] == [(1, "rise", 42)]


def test_factor_must_exceed_one():
    with pytest.raises(ValueError, match="factor must be > 1"):
        layer_error_jumps([0.1, 0.2], factor=1.0)


def test_a_jump_shared_by_every_method_is_called_a_property_of_the_model():
    runs = {"magnitude": _errors(11, 30.0), "wanda": _errors(11, 25.0), "sparsegpt": _errors(11, 40.0)}
    text = describe_layer_jumps(runs)
    assert "from layer 11 to layer 12 in every run" in text
    assert "property of the model" in text
    assert "drops ×" in text


def test_jumps_one_layer_apart_in_different_runs_are_the_same_place():
    runs = {"magnitude": _errors(11, 9.0), "sparsegpt": _errors(10, 7.0), "far": _errors(10, 8.0)}
    text = describe_layer_jumps(runs)
    assert text.startswith("The layer output error drops sharply between layers 10 and 12 in every run (magnitude ×9")
    assert "sparsegpt ×7 after layer 10" in text and "property of the model" in text
    apart = describe_layer_jumps({"a": _errors(11, 9.0), "b": _errors(5, 9.0)})
    assert "property of the model" not in apart and "a: drop ×" in apart and "b: drop ×" in apart


def test_a_jump_of_one_method_only_is_attributed_to_it():
    runs = {"magnitude": _errors(11, 30.0), "wanda": _errors(11, 1.0)}
    text = describe_layer_jumps(runs)
    assert "property of the model" not in text
    assert text.startswith("magnitude: drop ×")


def test_no_jump_gives_no_sentence():
    assert describe_layer_jumps({"a": _errors(3, 2.0), "b": _errors(3, 1.0)}) == ""


def _step(round_: int, ratio: float, before: float, lam: float, layer: int = 0, name: str = "q",
          improved: bool = True) -> LambdaStep:
    return LambdaStep(layer=layer, name=name, round=round_, lam=lam, lam_low=0.0, lam_high=1e6, e_total=1.0,
                      e_round=ratio, ratio=ratio, xi=0.3, sparsity_before_rounding=before, improved=improved)


def test_a_bisection_that_never_raised_lambda_says_so():
    steps = [_step(r, 0.05, 0.0, 1e-5 / 2 ** r, layer=r % 2) for r in range(6)]
    summary = lambda_summary(steps)
    assert summary is not None and summary.raised == 0 and summary.linears == 2 and not summary.engaged
    text = describe_lambda(summary)
    assert "never needed sparsity before rounding" in text
    assert "in 0 rounds" in text


def test_a_bisection_where_l1_zeroed_weights_says_it_engaged():
    steps = [_step(0, 0.9, 0.0, 1e-5), _step(1, 0.2, 0.42, 5e5)]
    summary = lambda_summary(steps)
    assert summary is not None and summary.raised == 1 and summary.engaged
    assert summary.max_sparsity_before_rounding == pytest.approx(0.42)
    assert "engaged: up to 42.0%" in describe_lambda(summary) and "improved the error had 42.0%" in \
        describe_lambda(summary)


def test_an_l1_that_zeroed_everything_in_rounds_that_did_not_improve_chose_no_mask():
    steps = [_step(0, 0.9, 0.0, 1e-5), _step(1, 0.95, 1.0, 5e5, improved=False)]
    text = describe_lambda(lambda_summary(steps))
    assert "up to 100.0% zeros before rounding" in text and "no round with a sparse FISTA solution improved" in text


def test_raised_but_never_sparse_is_its_own_case():
    summary = lambda_summary([_step(0, 0.9, 0.001, 1e-5), _step(1, 0.8, 0.002, 5e5)])
    assert summary is not None and summary.raised == 2 and not summary.engaged
    assert "λ was raised" in describe_lambda(summary)


def test_no_lambda_steps_no_summary():
    assert lambda_summary([]) is None
    assert describe_lambda(None) == ""
