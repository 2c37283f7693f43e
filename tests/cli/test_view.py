"""The CLI's progress bars, driven by synthetic events on a fake clock: each opens when its phase starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tqdm.std

from toolkit.cli.view import ProgressView
from toolkit.events import EvalProgress, LayerDone, LayerScored, LayerStarted, RunStarted, SublayerPruned

LAYERS = 30


class Clock:
    """tqdm's clock: ``now`` plus a few microseconds a call, as a real clock moves between two calls."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 2e-6
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(tqdm.std, "time", fake)  # every bar reads tqdm.std.time when it is created
    monkeypatch.setattr(tqdm.std.tqdm, "monitor_interval", 0)  # no monitor thread on the fake clock
    return fake


def seconds_per_unit(text: str, unit: str) -> list[float]:
    """Every rate the bars drew for ``unit``, as seconds per unit (``?`` rates are left out)."""
    rates = []
    for number, form in re.findall(rf"(\d+(?:\.\d+)?)(s/{unit}|{unit}/s)", text):
        rates.append(float(number) if form.startswith("s/") else 1 / float(number))
    return rates


def run_started() -> RunStarted:
    return RunStarted(run_id="r", model="m", method="wanda", sparsity="50%", options={}, protocol={},
                      num_layers=LAYERS, linears=["q"], device="cpu")


def pruned(layer: int) -> SublayerPruned:
    return SublayerPruned(layer=layer, name="self_attn.q_proj", shape=[4, 4], sparsity=0.5, rel_error=0.1,
                          rel_error_dense=0.1, damping=0.0, seconds=1.0)


def test_the_pruning_bar_opens_at_the_first_layer_and_times_only_the_layers(
        clock: Clock, capsys: pytest.CaptureFixture) -> None:
    view = ProgressView()
    view.on_event(run_started())
    for done in range(0, 211, 10):  # a 16-minute dense evaluation before any layer
        clock.now += 4.5
        view.on_event(EvalProgress(phase="dense", what="perplexity", done=done, total=210))
    before_layers = capsys.readouterr().err
    assert "prune wanda" not in before_layers and "layer" not in before_layers
    view.on_event(LayerStarted(layer=0, num_layers=LAYERS, groups=[["q"]]))
    assert "prune wanda 50%:   0%" in capsys.readouterr().err  # opened now, at 0 of 30
    clock.now += 4.0
    view.on_event(pruned(0))
    clock.now += 2.0
    view.on_event(LayerDone(layer=0, num_layers=LAYERS, output_rel_error=0.1, seconds=6.0))
    view.close()
    rates = seconds_per_unit(capsys.readouterr().err, "layer")
    assert rates and all(rate == pytest.approx(6.0, rel=0.01) for rate in rates), rates  # not 950 s/layer


def test_an_evaluation_bar_never_shows_the_speed_of_an_empty_interval(clock: Clock,
                                                                    capsys: pytest.CaptureFixture) -> None:
    view = ProgressView()
    clock.now += 20.0  # the first batch of 4 windows took 20 s before its first report
    view.on_event(EvalProgress(phase="pruned", what="perplexity", done=4, total=210))
    first = capsys.readouterr().err
    assert "eval pruned" in first and "4/210" in first
    assert seconds_per_unit(first, "window") == []  # "?", not 4 windows in a few microseconds
    for done in (8, 12):
        clock.now += 20.0
        view.on_event(EvalProgress(phase="pruned", what="perplexity", done=done, total=210))
    view.close()
    rates = seconds_per_unit(capsys.readouterr().err, "window")
    assert rates and all(rate == pytest.approx(5.0, rel=0.01) for rate in rates), rates


def test_a_bar_that_starts_at_zero_times_every_unit(clock: Clock, capsys: pytest.CaptureFixture) -> None:
    view = ProgressView()
    view.on_event(EvalProgress(phase="dense", what="generation", done=0, total=5))
    clock.now += 3.0
    view.on_event(EvalProgress(phase="dense", what="generation", done=1, total=5))
    view.close()
    rates = seconds_per_unit(capsys.readouterr().err, "prompt")
    assert rates and all(rate == pytest.approx(3.0, rel=0.01) for rate in rates), rates


def test_block_scoring_has_its_own_bar_before_the_pruning_bar(clock: Clock, capsys: pytest.CaptureFixture) -> None:
    view = ProgressView()
    view.on_event(run_started())
    for layer in range(3):
        clock.now += 2.0
        view.on_event(LayerScored(layer=layer, num_layers=3, head_scores=[], channel_quantiles=[], seconds=2.0))
    scoring = capsys.readouterr().err
    assert "score wanda 50%" in scoring and "prune wanda" not in scoring
    rates = seconds_per_unit(scoring, "layer")
    assert rates and all(rate == pytest.approx(2.0, rel=0.01) for rate in rates), rates
    view.on_event(LayerStarted(layer=0, num_layers=3, groups=[]))
    view.close()
    assert "prune wanda 50%:   0%|          | 0/3" in capsys.readouterr().err


def test_a_run_opens_each_bar_when_its_phase_starts(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """tiny-llama end to end: dense perplexity bar (from window 0), then the layers, then the pruned perplexity."""
    from toolkit.cli.main import main

    monkeypatch.setenv("PRUNELAB_CACHE", str(tmp_path))  # nothing cached: the dense perplexity is scored
    assert main(["prune", "--model", "tiny-llama", "--nsamples", "2", "--seqlen", "32", "--eval-seqlen", "32",
                 "--eval-windows", "6", "--eval-dense", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    order = [err.index(text) for text in ("eval dense:   0%|          | 0/6", "eval dense: 100%",
                                          "prune wanda 50%:   0%|          | 0/2", "prune wanda 50%: 100%",
                                          "eval pruned:   0%|          | 0/6", "eval pruned: 100%")]
    assert order == sorted(order), err


def test_the_precision_line_says_only_what_the_run_recorded(capsys: pytest.CaptureFixture) -> None:
    from toolkit.cli.view import precision_summary

    precision_summary({"precision": {"storage": "bfloat16", "saved": "bfloat16"}})  # a block-scope run's record
    line = capsys.readouterr().out.strip()
    assert line == "precision: model stored in bfloat16, saved in bfloat16" and "None" not in line
    precision_summary({})
    assert capsys.readouterr().out == ""
