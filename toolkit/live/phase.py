"""The status line of a live run: which phase is under way, and how long the rest of the run should take.

A run goes through these phases, in order (events that mark them in brackets):

1. dense perplexity (``EvalProgress`` phase "dense"; skipped, or read from the cache, when known);
2. dense zero-shot tasks and generations (``EvalProgress`` "dense", when asked for);
3. calibration capture: the calibration text runs through the model up to layer 0 (no event of
   its own: it is the time between the last dense stage, or RunStarted, and the first
   ``LayerStarted``);
4. pruning layer k (``LayerStarted`` … ``SublayerPruned``);
5. saving the masks, then pruned perplexity, zero-shot and generations (``EvalProgress`` "pruned").

The time left counts the phases still to come where it can: a pruned evaluation stage is
estimated by the time its dense twin took in this run (same windows, same model size). A stage
without a dense twin (its dense value came from the cache) is named instead of guessed. Torch-free.
"""

from __future__ import annotations

import math

from toolkit.live.view import RunView

CAPTURE = "calibration capture · running the calibration text through the model up to layer 0"


def pruned_evals_left(view: RunView) -> tuple[float, bool]:
    """Estimated seconds of the pruned evaluation stages not yet finished, and whether some are not estimable.

    Each pruned stage is estimated by the measured duration of the same dense stage; the stage
    under way counts only its own remaining time (:meth:`RunView.eta`), so it is left out here.
    """
    durations, stage = view.evals.durations, view.evals.stage
    current = (stage.phase, stage.what) if stage is not None else None
    seconds = sum(spent for (phase, what), spent in durations.items()
                  if phase == "dense" and ("pruned", what) not in durations and ("pruned", what) != current)
    evaluation = view.protocol.get("evaluation")
    unknown = bool(evaluation) and ("dense", "perplexity") not in durations and ("pruned", "perplexity") not in \
        durations and current != ("pruned", "perplexity")
    return seconds, unknown


def _left(seconds: float, unknown: bool = False) -> str:
    """``about 1 min 05 s left`` (``finishing`` under a second), ``+ the pruned evaluation`` when not estimable."""
    if not math.isfinite(seconds):
        text = "estimating time left"
    elif seconds < 1.0:
        text = "finishing" if not unknown else ""
    else:
        text = f"about {format_seconds(seconds)} left"
    if unknown:
        text = f"{text} + the pruned evaluation" if text else "the pruned evaluation is next"
    return text


def _elapsed(view: RunView, now: float) -> str:
    """``elapsed 43.0 s``: since RunStarted, on the consumer's clock (a replay: the run store's stamps).

    A replay of a run stored before its events were stamped has no clock: its elapsed time is
    ``not recorded`` (its prune time, in the result, is only a part of it).
    """
    if not math.isfinite(view.started_at):
        return "elapsed not recorded (an older run)"
    return f"elapsed {format_seconds(view.elapsed(now), tenths=True)}"


def _pruning_line(view: RunView, now: float) -> str:
    layer, done, total = view.layer_progress()
    later, unknown = pruned_evals_left(view)
    if view.fraction_done >= 1.0:  # every linear pruned: saving, then the pruned evaluation
        return " · ".join([f"pruning done · {done} of {total} layers · saving the masks", _elapsed(view, now),
                           _left(later, unknown) if later or unknown else "finishing"])
    parts = [f"pruning layer {layer}", f"{done} of {total} layers done"]
    if view.current_linear:
        parts.append(view.current_linear)
    parts += [f"{view.fraction_done:.0%} of linears", _elapsed(view, now), _left(view.eta(now) + later, unknown)]
    return " · ".join(parts)


def _stage_line(view: RunView, now: float) -> str:
    stage = view.evals.stage
    assert stage is not None
    if stage.done < stage.total:  # the stage is under way
        eta = view.eta(now)
        if stage.phase == "pruned":
            later, unknown = pruned_evals_left(view)
            return " · ".join([view.evals.stage_line(), _elapsed(view, now), _left(eta + later, unknown)])
        return " · ".join([view.evals.stage_line(), _elapsed(view, now),
                           _left(eta) + " in this step, then calibration capture and pruning"])
    if stage.phase == "dense":  # the last dense stage is done and no layer has started: capturing
        return " · ".join([CAPTURE, _elapsed(view, now), "estimating time left"])
    later, unknown = pruned_evals_left(view)
    return " · ".join([f"{view.evals.stage_line()} done · starting the next evaluation", _elapsed(view, now),
                       _left(later, unknown) if later or unknown else "finishing"])


def phase_line(view: RunView, now: float) -> str:
    """One line naming the phase under way, its progress, the time elapsed and the time left.

    ``pruning layer 3 · 3 of 30 layers done · q_proj · 12% of linears · elapsed 40 s · about 4 min 50 s left``;
    ``evaluating pruned · window 40/210 · elapsed … · about … left``; ``calibration capture · …``.
    Layers are counted from 0, as in the heat-map, the figure titles and the events.
    """
    if view.status == "idle":
        return "idle"
    if view.status != "running":
        _, done, total = view.layer_progress()
        return " · ".join([f"{done} of {total} layers done", f"{view.fraction_done:.0%} of linears",
                           _elapsed(view, now), view.status])
    if view.evals.stage is not None:
        return _stage_line(view, now)
    if view.current_layer < 0 and not view.pruned:  # before the first LayerStarted: dense evaluation or capture
        if view.protocol.get("evaluation") and not view.dense_ppl:
            return " · ".join(["dense perplexity starting (or read from the cache), then calibration capture",
                               _elapsed(view, now), "estimating time left"])
        return " · ".join([CAPTURE, _elapsed(view, now), "estimating time left"])
    return _pruning_line(view, now)


def format_seconds(seconds: float, tenths: bool = False) -> str:
    """``42 s`` (``4.2 s`` with ``tenths`` under a minute), ``3 min 05 s``, ``1 h 02 min``; ``–`` when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "–"
    if tenths and seconds < 60:
        return f"{seconds:.1f} s"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def progress_line(view: RunView, now: float) -> str:
    """One line naming the phase under way, with elapsed time and time left (:func:`phase_line`).

    ``pruning layer 3 · 3 of 30 layers done · q_proj · 12% of linears · elapsed 40 s · about 4 min 50 s left``;
    layers are counted from 0, as in the heat-map, the figure titles and the events.
    """
    return phase_line(view, now)
