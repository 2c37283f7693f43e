"""The Lesson: four pruning methods at 50% on one model, run once (or taken from the run store) and set side by side.

:func:`lesson_configs` builds one :class:`~toolkit.api.RunConfig` per method of :data:`METHODS` under
the class protocol (:data:`toolkit.run.protocols.CLASS`: 16 × 128 calibration tokens, 8 evaluation
windows of 128 tokens), with dense perplexity and greedy generations of :data:`GENERATE_TOKENS` new
tokens, the layer output error on
:data:`ERROR_WINDOWS` calibration windows, :data:`THREADS` CPU thread and FISTAPruner's class budget
(:data:`OPTIONS`). :func:`plan_lesson` looks each one up in the store, matched by model + method +
sparsity + protocol + options (:meth:`RunConfig.reuse_key`); a stored run without generations is
not reused (a run keeps its masks, not its weights, so its texts cannot be made afterwards: it is
run again). :func:`run_lesson` runs the missing ones; :class:`~toolkit.teach.lesson_clock.LessonClock`
says how long they will take, from :data:`REFERENCE` scaled by the pace measured as they run (from the
first perplexity window on).

It goes through :mod:`toolkit.api` only, as the app does.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field, replace

from toolkit.api import CancelToken, RunConfig, follow, list_runs
from toolkit.evaluation.generate import DEFAULT_PROMPTS
from toolkit.events import Event
from toolkit.run.protocols import CLASS
from toolkit.spec.targets import Unstructured
from toolkit.store.runs import RunRecord
from toolkit.teach.lesson_clock import LessonClock, Profile
from toolkit.teach.lesson_view import LABELS

METHODS = ("magnitude", "wanda", "sparsegpt", "fista")
SPARSITY = 0.5
ERROR_WINDOWS = 2  # calibration windows behind each layer's output error (the CLI's default is 4)
# One CPU thread: on the shared 2-core machine a magnitude run of the class protocol pruned a layer in 1.1-1.4 s
# with 1 thread and 7-11 s with torch's default 2 (load average 17, the same hour), and generated a prompt in
# 5-6 s against 22-33 s: two threads spin against each other whenever another job holds a core.
THREADS = 1
# FISTAPruner's class budget: at most 2 outer rounds (λ bisection steps) of 10 FISTA iterations, L by power
# iteration, a solver trace point every 5 iterations; the paper's (and the CLI's) are 5 rounds of 20, eigvalsh,
# every iteration. Its warm start is SparseGPT's mask, and a round only replaces it when it lowers the error.
OPTIONS = {"fista": {"max_rounds": 2, "fista_iters": 10, "lipschitz": "power", "trace_every": 5}}
# New tokens per greedy prompt (the CLI's default is 32): 16 tokens (a dozen words) still show whether a pruned
# model's text holds together; the four runs generate 40 texts, 22-26 % of the quiet lessons' wall time at 32.
GENERATE_TOKENS = 16
MEASURED_TOKENS = 32  # the new tokens per prompt of the lessons REFERENCE was measured on
# Reference seconds per unit of work of the class lesson on smollm2-135m (toolkit.teach.lesson_clock):
# Profile.from_measured of the two quietest benchmarks/bench_lesson_class.py runs (benchmarks/results/
# cpu_lesson_class.jsonl, lines 3 and 4: whole lessons from an empty store on the shared 2-core CPU at load 5.6 and
# 6.8), each kind in units of that run's perplexity window (the probe), averaged, times their mean window (2.219 s).
# The clock rescales it by the pace measured from the first window on. A prompt's cost is scaled from 32 to
# GENERATE_TOKENS new tokens in proportion (decoding one token at a time dominates a prompt).
MEASURED = Profile(load=1.081, window=2.219, prompt=2.488, capture=0.028, finish=0.001,
                   layer={"magnitude": 0.481, "wanda": 0.590, "sparsegpt": 1.196, "fista": 6.613}, default_layer=1.196)
# The clock those lessons were measured with counted the pruned windows of the three later runs as no work (their
# cached dense perplexity took their windows off twice): their seconds landed on the first run's 16 window units, so
# its window is the seconds of 40 windows over 16, 2.5× one window. Every other kind is right in absolute terms (each
# was a ratio to that window, times the same window). An idle lesson measured the same way gave 1.184 s: 0.474 s.
WINDOWS_COUNTED = 16 / 40  # window units counted / windows run in those lessons (8 + 8, then 8 in each of 3 runs)
REFERENCE = replace(MEASURED, window=MEASURED.window * WINDOWS_COUNTED,
                    prompt=MEASURED.prompt * GENERATE_TOKENS / MEASURED_TOKENS)


def lesson_configs(model: str, runs_dir: str, methods: Sequence[str] = METHODS) -> list[RunConfig]:
    """One config per method: 50% unstructured, class protocol, dense perplexity and generations, in ``runs_dir``."""
    return [RunConfig(model=model, method=method, sparsity=Unstructured(SPARSITY), calib="wiki",
                      nsamples=CLASS.nsamples, seqlen=CLASS.seqlen, eval_data="wiki", eval_seqlen=CLASS.eval_seqlen,
                      eval_windows=CLASS.eval_windows, eval_dense=True, generate=True, generate_tokens=GENERATE_TOKENS,
                      error_windows=ERROR_WINDOWS, calibrate="always",  # magnitude's output error, beside the others'
                      threads=THREADS, options=dict(OPTIONS.get(method, {})), out_dir=runs_dir)
            for method in methods]


def has_generations(record: RunRecord) -> bool:
    """Whether a finished run stored the pruned model's greedy texts (result.json ``generations``)."""
    result = record.result if isinstance(record.result, dict) else {}
    records = (result.get("generations") or {}).get("records") or []
    return bool(records) and all(isinstance(r, dict) and "pruned" in r for r in records)


@dataclass(frozen=True)
class LessonPlan:
    """What the lesson will do: the configs, the stored run of each (None: to run), runs left out and why."""

    configs: tuple[RunConfig, ...]
    stored: dict[str, RunRecord | None]
    without_texts: dict[str, str] = field(default_factory=dict)  # method → a matching stored run without generations

    @property
    def to_run(self) -> list[RunConfig]:
        """The configs with no matching finished run (with generations) in the store."""
        return [c for c in self.configs if self.stored.get(c.method) is None]

    def clock(self, now: float) -> LessonClock:
        """A clock for the runs still to make, started at ``now``."""
        return LessonClock(REFERENCE, [c.method for c in self.to_run], CLASS.eval_windows or 0, now)

    @property
    def total_seconds(self) -> float:
        """The reference estimate of the runs still to make (before anything is measured on this machine)."""
        return self.clock(0.0).seconds_left(0.0)


def find_reusable(runs_dir: str, config: RunConfig, records: Sequence[RunRecord]) -> tuple[RunRecord | None, str]:
    """The newest finished run of ``config``'s experiment that has generations, and the newest one without ("")."""
    key, without = config.reuse_key(), ""
    for record in records:
        if record.status == "finished" and all(record.config.get(k) == v for k, v in key.items()):
            if has_generations(record):
                return record, without
            without = without or record.run_id
    return None, without


def plan_lesson(model: str, runs_dir: str, methods: Sequence[str] = METHODS) -> LessonPlan:
    """Look every lesson run up in ``runs_dir`` (raises ToolkitError for bad input)."""
    configs = tuple(lesson_configs(model, runs_dir, methods))
    records = list_runs(runs_dir)
    stored: dict[str, RunRecord | None] = {}
    without: dict[str, str] = {}
    for config in configs:
        stored[config.method], left_out = find_reusable(runs_dir, config, records)
        if left_out and stored[config.method] is None:
            without[config.method] = left_out
    return LessonPlan(configs, stored, without)


def format_duration(seconds: float) -> str:
    """``45 s``, ``3 min``, ``1 h 10 min`` (rounded; estimates need no more)."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def settings_text() -> str:
    """The class preset's settings, as the page states them."""
    fista = OPTIONS["fista"]
    return (f"class preset: {CLASS.nsamples} × {CLASS.seqlen} calibration tokens, {CLASS.eval_windows} evaluation "
            f"windows of {CLASS.eval_seqlen} tokens, layer output error on {ERROR_WINDOWS} calibration windows, "
            f"{len(DEFAULT_PROMPTS)} greedy prompts × {GENERATE_TOKENS} new tokens, {THREADS} CPU thread; "
            f"FISTAPruner with at most {fista['max_rounds']} λ rounds of {fista['fista_iters']} iterations "
            "(the paper's: 5 of 20)")


def plan_text(plan: LessonPlan) -> str:
    """Markdown saying which runs are reused and about how long the others take, before anything runs."""
    names = ", ".join(LABELS.get(c.method, c.method) for c in plan.configs)
    lines = [f"**Lesson**: {names} at {SPARSITY:.0%} on `{plan.configs[0].model}`; {settings_text()}."]
    reused = [c.method for c in plan.configs if plan.stored.get(c.method) is not None]
    if reused:
        listed = ", ".join(f"{LABELS.get(m, m)} (`{r.run_id}`)" for m in reused if (r := plan.stored[m]))
        lines.append(f"Reused from the run store: {listed}.")
    if plan.without_texts:
        listed = ", ".join(f"{LABELS.get(m, m)} (`{i}`)" for m, i in plan.without_texts.items())
        lines.append(f"Stored without generations, so run again: {listed}. A run keeps its masks, not its weights, "
                     "so its pruned model's texts cannot be made afterwards.")
    if plan.to_run:
        lines.append(f"To run: {', '.join(LABELS.get(c.method, c.method) for c in plan.to_run)}; about "
                     f"**{format_duration(plan.total_seconds)}** at the pace of the quiet reference lessons, "
                     "rescaled by this machine's pace from the first perplexity window on.")
    else:
        lines.append("Every run is in the store: drawing takes a few seconds.")
    return "\n\n".join(lines)


@dataclass(frozen=True)
class LessonPoint:
    """One lesson run's end: ``status`` finished | failed | cancelled, its run id, why it failed."""

    method: str
    status: str
    run_id: str = ""
    error: str = ""


def run_lesson(plan: LessonPlan, cancel: CancelToken | None = None) -> Iterator[Event | LessonPoint]:
    """Run the missing lesson runs in order, yielding their events and a :class:`LessonPoint` as each ends.

    A run that fails gives a point with status "failed" and the lesson goes on; cancelling ends it
    (runs already finished stay in the store and are reused next time).
    """
    token = cancel or CancelToken()
    for config in plan.to_run:
        if token.cancelled:
            yield LessonPoint(config.method, "cancelled", error="cancelled")
            return
        point = yield from _one(config, token)
        yield point
        if point.status == "cancelled":
            return


def _one(config: RunConfig, token: CancelToken) -> Generator[Event, None, LessonPoint]:
    """Drive one run to its end, yielding its events; returns (StopIteration) its :class:`LessonPoint`."""
    outcome = yield from follow(config, token)
    return LessonPoint(config.method, outcome.status, outcome.run_id, outcome.error)


def wall_clock() -> float:
    """The clock the lesson's estimate runs on (seconds, monotonic)."""
    return time.monotonic()
