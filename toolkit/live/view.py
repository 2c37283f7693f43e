"""Fold a run's events into a plain :class:`RunView` (torch-free; shared by the app and the widgets).

A UI keeps one ``RunView`` per run and calls :meth:`RunView.apply` for every event it receives
(live from :func:`toolkit.api.run`, or replayed from ``events.jsonl``). The view holds only what
the plots need: the pruned-linear events for the error heat-map, the finished layers, progress,
the warnings, and the solver / λ / block trace of the *current* linear (older traces are dropped,
so a long FISTA run does not grow memory). Figure builders in :mod:`toolkit.figures.run` take these lists.

Times are what the consumer's clock says (``now``, seconds, e.g. ``time.monotonic()``): events
carry durations but no wall-clock stamps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolkit.events import (
    BlockStep,
    EvalPoint,
    EvalProgress,
    Event,
    Generated,
    LambdaStep,
    LayerDone,
    LayerStarted,
    RunFailed,
    RunFinished,
    RunStarted,
    RunWarning,
    SolverStep,
    SublayerPruned,
    TaskScore,
)
from toolkit.live.allocation import AllocationView
from toolkit.live.eval import EvalView
from toolkit.live.structure import StructureView

TERMINAL = ("finished", "failed", "cancelled")


@dataclass
class Trace:
    """The steps of one kind of trace for one linear (``layer``, ``name``)."""

    layer: int = -1
    name: str = ""
    steps: list[Any] = field(default_factory=list)
    seen: int = 0  # the view's event count at the latest step (which trace moved last)

    def add(self, event: Any, seen: int = 0) -> None:
        """Append ``event`` (the view's ``seen``-th event); a step of another linear starts a fresh trace."""
        if (event.layer, event.name) != (self.layer, self.name):
            self.layer, self.name, self.steps = event.layer, event.name, []
        self.steps.append(event)
        self.seen = seen

    @property
    def label(self) -> str:
        """``layer 3 · mlp.up_proj`` or "" when empty."""
        return f"layer {self.layer} · {self.name}" if self.steps else ""


@dataclass
class RunView:
    """Everything a live dashboard draws, as plain data.

    ``revision`` counts folded events per section ("heatmap", "layers", "solver", "lambda",
    "ranking", "kept", "depth", "allocation", "refine", "warnings", "result") so a UI can skip re-sending
    figures that did not change.
    """

    status: str = "idle"  # idle | running | finished | failed | cancelled
    run_id: str = ""
    model: str = ""
    model_label: str = ""
    method: str = ""
    sparsity: str = ""  # the compression's label (``50%``, ``2:4+int4:g128``)
    compression: dict[str, Any] = field(default_factory=dict)  # its plain data (empty for schema-1 runs)
    options: dict[str, Any] = field(default_factory=dict)
    protocol: dict[str, Any] = field(default_factory=dict)
    device: str = ""
    devices: str = ""  # which device(s) ran, from RunFinished ("2 ranks × cpu (gloo)"); "" in older runs
    gpu_peak_mb: float = math.nan  # GPU memory peak (nan: no GPU ran, or an older run)
    num_layers: int = 0
    linears: list[str] = field(default_factory=list)
    current_layer: int = -1
    current_linear: str = ""
    pruned: list[SublayerPruned] = field(default_factory=list)
    layers_done: list[LayerDone] = field(default_factory=list)
    solver: Trace = field(default_factory=Trace)
    lambdas: Trace = field(default_factory=Trace)
    blocks: Trace = field(default_factory=Trace)
    warnings: list[str] = field(default_factory=list)
    structure: StructureView = field(default_factory=StructureView)  # block-scope runs: Newton, ranking, kept
    allocation: AllocationView = field(default_factory=AllocationView)  # per-layer sparsity, DSnoT's refinement
    dense_ppl: dict[str, float] = field(default_factory=dict)
    dense_cached: set[str] = field(default_factory=set)  # datasets whose dense perplexity came from the cache
    ppl: dict[str, float] = field(default_factory=dict)
    achieved_sparsity: float = math.nan  # from the keep-masks, never from exact zeros
    bits_per_weight: float = math.nan  # storage bits of the decoder-layer linears (scales counted)
    params: tuple[Any, Any] = (None, None)  # decoder-layer linear weights (before, after); None: not recorded
    estimated_bytes: Any = None
    checkpoint_bytes: Any = None
    bought: dict[str, Any] | None = None  # result.json's "bought" (toolkit/run/bought.py); None in older runs
    prune_seconds: float = math.nan
    error: str = ""
    started_at: float = math.nan  # consumer clock at RunStarted
    prune_started_at: float = math.nan  # consumer clock at the first LayerStarted
    ended_at: float = math.nan
    evals: EvalView = field(default_factory=EvalView)  # evaluation progress, zero-shot scores, generations
    events_seen: int = 0
    revision: dict[str, int] = field(default_factory=dict)

    # -- folding -------------------------------------------------------------------------
    def apply(self, event: Event, now: float = math.nan) -> RunView:
        """Fold one event into the view (in place) and return the view."""
        self.events_seen += 1
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event, now)
        self._bump(*self.structure.apply(event), *self.allocation.apply(event))
        return self

    def _bump(self, *sections: str) -> None:
        for section in sections:
            self.revision[section] = self.revision.get(section, 0) + 1

    # -- derived numbers -------------------------------------------------------------------
    @property
    def total_linears(self) -> int:
        """Linears to prune in the whole model (layers × linears per layer), 0 before RunStarted."""
        return self.num_layers * len(self.linears)

    @property
    def fraction_done(self) -> float:
        """Pruned linears / all linears, in [0, 1]."""
        total = self.total_linears
        return min(1.0, len(self.pruned) / total) if total else 0.0

    def elapsed(self, now: float) -> float:
        """Seconds since RunStarted (frozen at the end of the run); a replay gives the prune time."""
        if not math.isfinite(self.started_at):
            return self.prune_seconds
        end = self.ended_at if math.isfinite(self.ended_at) else now
        return end - self.started_at

    @property
    def evaluating(self) -> bool:
        """True while an evaluation stage (perplexity, zero-shot task, generation) is under way."""
        return self.status == "running" and self.evals.stage is not None

    @property
    def bar_fraction(self) -> float:
        """What a progress bar shows: the evaluation stage's fraction while one runs, else the linears'."""
        return self.evals.fraction if self.evaluating else self.fraction_done

    def eta(self, now: float) -> float:
        """Estimated seconds left of the evaluation stage under way, else of pruning (pace so far); nan when unknown."""
        if self.evaluating:
            return self.evals.eta(now)
        done = self.fraction_done
        if self.status != "running" or not math.isfinite(self.prune_started_at) or done <= 0:
            return math.nan
        spent = now - self.prune_started_at
        return spent * (1.0 - done) / done

    def layer_progress(self) -> tuple[int, int, int]:
        """(layer being pruned, from 0 as in the heat-map, -1 before the first; layers done; layers)."""
        return (self.current_layer, len(self.layers_done), self.num_layers)

    def heatmap_matrix(self) -> tuple[list[list[float]], list[str]]:
        """Relative error per (layer, linear) as rows × columns (nan = not yet), and the columns."""
        return error_matrix(self.pruned, self.num_layers, self.linears)


def error_matrix(
    pruned: Iterable[SublayerPruned], num_layers: int = 0, linears: Iterable[str] = ()
) -> tuple[list[list[float]], list[str]]:
    """Rows = layers 0..L-1, columns = linears (given order, then any others seen); nan = missing."""
    pruned = list(pruned)
    columns = list(dict.fromkeys(list(linears) + [event.name for event in pruned]))
    rows = max([num_layers] + [event.layer + 1 for event in pruned])
    index = {name: j for j, name in enumerate(columns)}
    matrix = [[math.nan] * len(columns) for _ in range(rows)]
    for event in pruned:
        matrix[event.layer][index[event.name]] = _num(event.rel_error)
    return matrix, columns


def _num(value: Any) -> float:
    """A float, nan for None or anything that is not a number (a hand-edited record)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _on_started(view: RunView, event: RunStarted, now: float) -> None:
    fresh = RunView(status="running", run_id=event.run_id, model=event.model, method=event.method,
                    sparsity=event.sparsity, compression=dict(event.compression or {}),
                    options=dict(event.options), protocol=dict(event.protocol),
                    device=event.device, num_layers=int(event.num_layers), linears=list(event.linears),
                    started_at=now, events_seen=view.events_seen)
    fresh.model_label = str(fresh.protocol.get("model_label", event.model))
    fresh.revision = dict(view.revision)
    view.__dict__.update(fresh.__dict__)
    view._bump("heatmap", "layers", "solver", "lambda", "ranking", "kept", "depth", "warnings", "result", "progress",
               "generations")


def _on_layer_started(view: RunView, event: LayerStarted, now: float) -> None:
    view.evals.stage = None  # pruning again: the dense evaluation is over
    view.current_layer = int(event.layer)
    view.num_layers = max(view.num_layers, int(event.num_layers))
    if not math.isfinite(view.prune_started_at):
        view.prune_started_at = now
    view._bump("progress")


def _on_pruned(view: RunView, event: SublayerPruned, now: float) -> None:
    view.pruned.append(event)
    view.current_layer, view.current_linear = int(event.layer), event.name
    view._bump("heatmap", "progress")


def _on_layer_done(view: RunView, event: LayerDone, now: float) -> None:
    view.layers_done.append(event)
    view._bump("layers", "progress")


def _on_solver(view: RunView, event: SolverStep, now: float) -> None:
    view.solver.add(event, view.events_seen)
    view.current_linear = event.name
    view._bump("solver")


def _on_block(view: RunView, event: BlockStep, now: float) -> None:
    view.blocks.add(event, view.events_seen)
    view.current_linear = event.name
    view._bump("solver")


def _on_lambda(view: RunView, event: LambdaStep, now: float) -> None:
    view.lambdas.add(event, view.events_seen)
    view._bump("lambda")


def _on_eval(view: RunView, event: EvalPoint, now: float) -> None:
    target = view.dense_ppl if event.which == "dense" else view.ppl
    target[event.dataset] = _num(event.ppl)
    if event.which == "dense" and event.cached:
        view.dense_cached.add(event.dataset)
    view._bump("result")


def _on_eval_progress(view: RunView, event: EvalProgress, now: float) -> None:
    view.evals.progress(event, now)
    view._bump("progress")


def _on_task_score(view: RunView, event: TaskScore, now: float) -> None:
    view.evals.score(event)
    view._bump("result")


def _on_generated(view: RunView, event: Generated, now: float) -> None:
    view.evals.text(event)
    view._bump("generations")


def _on_warning(view: RunView, event: RunWarning, now: float) -> None:
    where = f"layer {event.layer} {event.name}: " if event.layer >= 0 else ""
    view.warnings.append(f"{where}{event.message}")
    view._bump("warnings")


def _on_finished(view: RunView, event: RunFinished, now: float) -> None:
    view.status = "finished"
    view.evals.stage = None
    view.achieved_sparsity = _num(event.achieved_sparsity)
    view.bits_per_weight = _num(event.bits_per_weight)
    view.params = (event.params_before, event.params_after)
    view.estimated_bytes, view.checkpoint_bytes = event.estimated_bytes, event.checkpoint_bytes
    view.bought = dict(event.bought) if isinstance(event.bought, dict) else None
    view.prune_seconds = _num(event.prune_seconds)
    view.devices, view.gpu_peak_mb = event.devices, _num(event.gpu_peak_mb)
    view.ppl.update({k: _num(v) for k, v in dict(event.ppl).items()})
    view.dense_ppl.update({k: _num(v) for k, v in dict(event.dense_ppl).items()})
    view.ended_at = now
    view._bump("result", "progress")


def _on_failed(view: RunView, event: RunFailed, now: float) -> None:
    view.status = "cancelled" if event.cancelled else "failed"
    view.error = event.error
    view.ended_at = now
    view._bump("result", "progress")


_HANDLERS = {
    RunStarted: _on_started, LayerStarted: _on_layer_started, SublayerPruned: _on_pruned, LayerDone: _on_layer_done,
    SolverStep: _on_solver, BlockStep: _on_block, LambdaStep: _on_lambda, EvalPoint: _on_eval,
    RunWarning: _on_warning, RunFinished: _on_finished, RunFailed: _on_failed, EvalProgress: _on_eval_progress,
    TaskScore: _on_task_score, Generated: _on_generated,
}


def fold(events: Iterable[Event], view: RunView | None = None, times: Sequence[float] = ()) -> RunView:
    """Replay ``events`` into a view (a stored run's ``events.jsonl``, or a test's list).

    ``times`` (seconds, one per event; the run store's stamps) are the clock each event is folded
    at, so the replay's elapsed time is the live run's; without them it is unknown (nan).
    An event whose fields do not fold (a hand-edited record) becomes a warning instead of an
    exception. A replayed run that never reached RunFinished/RunFailed keeps status "running";
    pass the run store's status to :func:`settle` to fix that.
    """
    view = view or RunView()
    for number, event in enumerate(events, 1):
        try:
            view.apply(event, times[number - 1] if number <= len(times) else math.nan)
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
            view.warnings.append(f"event {number} ({getattr(event, 'kind', '?')}) unreadable: {exc}")
            view._bump("warnings")
    return view


def settle(view: RunView, status: str, error: str = "") -> RunView:
    """Give a replayed view the run store's final ``status`` when its events stop early."""
    if view.status not in TERMINAL and status != "running":
        view.status = status if status in (*TERMINAL, "interrupted") else "failed"
        view.error = view.error or error or status
    return view


def trace_for(events: Iterable[Event], layer: int, name: str) -> RunView:
    """A view whose solver / λ / block traces are those of linear (``layer``, ``name``)."""
    view = RunView()
    for event in events:
        if isinstance(event, SolverStep | LambdaStep | BlockStep) and (event.layer, event.name) == (layer, name):
            view.apply(event)
    return view


def traced_linears(events: Iterable[Event]) -> list[tuple[int, str]]:
    """(layer, linear) of every linear that has solver, λ or block steps, in run order."""
    seen: dict[tuple[int, str], None] = {}
    for event in events:
        if isinstance(event, SolverStep | LambdaStep | BlockStep):
            seen[(event.layer, event.name)] = None
    return list(seen)


