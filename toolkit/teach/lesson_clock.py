"""The Lesson's clock: the stage under way and the time left, from the pace measured on this machine as it runs.

A lesson is a list of runs; each run is a fixed sequence of work (docs/architecture.md, "The flow of
one run")::

    load (to RunStarted) → dense perplexity windows → dense prompts → calibration (layer 0's inputs,
    to the first LayerStarted) → decoder layers → wrap-up (the pruning's last steps, to the pruned
    evaluation's opening tick) → pruned perplexity windows → pruned prompts → finish

:class:`LessonClock` folds the runs' events with the consumer's clock. The time between two boundary
events (RunStarted, an EvalProgress tick, LayerStarted, LayerDone, RunFinished/RunFailed) is the time of
the work the later one completes, of one *kind* (``load``, ``window``, ``prompt``, ``capture``,
``layer:<method>``, ``wrap``, ``finish``). The wrap-up has its own kind because it is not a window (it
is short: 0.08 s a run in a lesson measured at load 18). A :class:`Profile` holds reference seconds per
unit of each kind; only their ratios matter. :meth:`Profile.from_measured` builds one from whole lessons
measured before: each kind's cost in units of the *probe* (one perplexity window: a forward of the whole
model over one window, the first work every lesson does), averaged over the lessons, times their mean
probe seconds. The pace of this machine is the speed factor s = Σ measured seconds / Σ reference seconds
of the work done so far, each piece weighted by exp(−age / :data:`MEMORY`) so a change of load shows
within a minute; after the first window it is that window's seconds over the reference window's, so the
whole estimate is this machine's throughput from then on. The time left is

    (the stage under way: its own pace once two units are done, blended with s × reference)
    + s × Σ reference seconds of the work still to come  − the time already spent on the current unit

Before the first unit is done s = 1: the estimate is the reference profile itself. The first run's
load is not a measure of pace (it also imports the libraries once) and stays out of s. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from toolkit.events import EvalPoint, EvalProgress, Event, LayerDone, LayerStarted, RunFailed, RunFinished, RunStarted

MEMORY = 60.0  # seconds: the age at which a measured piece of work counts e⁻¹ as much as one just measured
OWN_PACE_AFTER = 2  # units of the stage under way after which its own pace counts as much as the profile's
STAGE_NAMES = {("dense", "perplexity"): "dense evaluation", ("dense", "generation"): "dense generations",
               ("pruned", "perplexity"): "pruned evaluation", ("pruned", "generation"): "generations"}


@dataclass(frozen=True)
class Profile:
    """Reference seconds of one unit of each kind of work, and the sizes a lesson run is assumed to have.

    ``layer`` maps a method to the seconds of one decoder layer; a method missing from it counts as
    ``default_layer``. ``layers`` and ``prompts`` are corrected by the first run's RunStarted and ticks.
    """

    load: float
    window: float
    prompt: float
    capture: float
    finish: float
    layer: dict[str, float]
    default_layer: float
    wrap: float = 0.0
    layers: int = 30
    prompts: int = 5

    @classmethod
    def from_measured(cls, lessons: Sequence[Mapping[str, float]], probe: str = "window", default_layer: str = "",
                      **sizes: int) -> Profile:
        """The profile of whole lessons measured before (``bench_lesson_class``'s ``measured``: seconds per unit).

        Each kind is taken in units of ``probe`` in each lesson, the ratios are averaged over the
        lessons and scaled by the lessons' mean probe seconds. ``default_layer`` names the method
        whose layer cost stands for a method not measured (else the mean layer cost).
        """
        if not lessons or any(m.get(probe, 0.0) <= 0 for m in lessons):
            raise ValueError(f"every lesson needs a measured {probe!r}")
        kinds = set.intersection(*(set(m) for m in lessons))
        probe_seconds = sum(m[probe] for m in lessons) / len(lessons)
        cost = {k: probe_seconds * sum(m[k] / m[probe] for m in lessons) / len(lessons) for k in kinds}
        layer = {k.split(":", 1)[1]: v for k, v in cost.items() if k.startswith("layer:")}
        fallback = layer.get(default_layer, sum(layer.values()) / len(layer) if layer else 0.0)
        return cls(load=cost.get("load", 0.0), window=cost.get("window", 0.0), prompt=cost.get("prompt", 0.0),
                   capture=cost.get("capture", 0.0), finish=cost.get("finish", 0.0), layer=layer,
                   default_layer=fallback, wrap=cost.get("wrap", 0.0), **sizes)

    def seconds(self, kind: str) -> float:
        """Reference seconds of one unit of ``kind``."""
        if kind.startswith("layer:"):
            return self.layer.get(kind.split(":", 1)[1], self.default_layer)
        return float(getattr(self, kind))


@dataclass
class _Run:
    """One lesson run: its method, the units of each kind it still has to do, where it is."""

    method: str
    left: dict[str, float]
    stage: str = "waiting"
    stage_kind: str = ""
    stage_done: int = 0
    stage_total: int = 0
    stage_seconds: float = 0.0  # measured seconds of the units of the stage under way


@dataclass
class LessonClock:
    """The stage line and the time left of a lesson; feed it every event with :meth:`apply`."""

    profile: Profile
    methods: Sequence[str]
    windows: int
    started_at: float
    runs: list[_Run] = field(default_factory=list)
    index: int = 0  # the run under way (== len(runs) when every run has ended)
    boundary: float = math.nan  # consumer clock at the last boundary event
    pieces: list[tuple[float, float, float, str, float]] = field(default_factory=list)  # at, s, ref. s, kind, units

    def __post_init__(self) -> None:
        self.boundary = self.started_at
        self.runs = [_Run(m, self._work(m, first=i == 0)) for i, m in enumerate(self.methods)]
        if self.runs:
            self.runs[0].stage = "loading the model"

    def _work(self, method: str, first: bool) -> dict[str, float]:
        """The units of one run: the dense perplexity only in the first (later runs find it in the cache)."""
        p = self.profile
        windows = self.windows * (2 if first else 1)
        return {"load": 1, "window": windows, "prompt": 2 * p.prompts, "capture": 1, f"layer:{method}": p.layers,
                "wrap": 1, "finish": 1}

    # -- folding -------------------------------------------------------------------------------
    def apply(self, event: Event, now: float) -> None:
        """Fold one event of the run under way at consumer clock ``now`` (seconds)."""
        if self.index >= len(self.runs):
            return
        run = self.runs[self.index]
        if isinstance(event, RunStarted):
            self._sizes(event.num_layers, event.method)
            self._spend(run, "load", 1, now, paced=self.index > 0)
            self._stage(run, "dense evaluation", "", 0, 0)
        elif isinstance(event, EvalPoint) and event.which == "dense" and event.cached and self.index == 0:
            run.left["window"] = max(0.0, run.left.get("window", 0) - self.windows)  # only the first counted them
        elif isinstance(event, EvalProgress):
            self._tick(run, event, now)
        elif isinstance(event, LayerStarted):
            kind = "capture" if event.layer == 0 and run.left.get("capture", 0) > 0 else f"layer:{run.method}"
            self._spend(run, kind, 1 if kind == "capture" else 0, now)
            self._stage(run, f"pruning layer {event.layer + 1} of {event.num_layers}", f"layer:{run.method}",
                        event.layer, event.num_layers)
        elif isinstance(event, LayerDone):
            self._spend(run, f"layer:{run.method}", 1, now)
            run.stage_done = event.layer + 1
        elif isinstance(event, RunFinished | RunFailed):
            self._spend(run, "finish", 1, now)
            self.end_run(now)

    def ended(self, method: str, now: float) -> None:
        """``method``'s run ended without its last event (refused before it started): the next one starts."""
        if self.index < len(self.runs) and self.runs[self.index].method == method:
            self.end_run(now)

    def end_run(self, now: float) -> None:
        """The run under way ended: the next one starts loading."""
        if self.index < len(self.runs):
            self.runs[self.index].left = {}
            self.runs[self.index].stage = "done"
            self.index += 1
            self.boundary = now
            if self.index < len(self.runs):
                self.runs[self.index].stage = "loading the model"

    def _sizes(self, layers: int, method: str) -> None:
        """The real layer count replaces the profile's in every run still to do."""
        if layers <= 0 or layers == self.profile.layers:
            return
        for run in self.runs[self.index:]:
            key = f"layer:{run.method}"
            run.left[key] = max(0.0, run.left.get(key, 0) + layers - self.profile.layers)
        self.profile = _replace(self.profile, layers=layers)

    def _tick(self, run: _Run, event: EvalProgress, now: float) -> None:
        kind = "window" if event.what == "perplexity" else "prompt"
        stage = STAGE_NAMES.get((event.phase, event.what), f"{event.what} ({event.phase})")
        fresh = stage != run.stage or kind != run.stage_kind
        units = event.done if fresh else event.done - run.stage_done
        if fresh and event.phase == "pruned" and run.left.get("wrap", 0) > 0:
            self._spend(run, "wrap", 1, now)  # from the last layer to the pruned evaluation's opening tick
        if kind == "prompt" and fresh and event.total != self.profile.prompts and event.total > 0:
            for later in self.runs[self.index:]:
                later.left["prompt"] = later.left.get("prompt", 0) + 2 * (event.total - self.profile.prompts)
            self.profile = _replace(self.profile, prompts=event.total)
        self._spend(run, kind, max(0, units), now)
        if fresh:
            run.stage_seconds = 0.0
            self._stage(run, stage, kind, event.done, event.total)
        run.stage_done = event.done
        if event.done >= event.total and event.phase == "dense":  # next: the other dense stage, or calibration
            self._stage(run, "calibration: capturing layer 0's inputs", "capture", 0, 0)

    def _stage(self, run: _Run, name: str, kind: str, done: int, total: int) -> None:
        if kind != run.stage_kind:  # a new kind of work; the next layer of the same pruning keeps its pace
            run.stage_seconds = 0.0
        run.stage, run.stage_kind, run.stage_done, run.stage_total = name, kind, done, total

    def _spend(self, run: _Run, kind: str, units: float, now: float, paced: bool = True) -> None:
        """The time since the last boundary was ``units`` of ``kind`` in ``run``.

        ``paced=False`` keeps the time out of the speed factor: the first run's load also imports the
        libraries and reads the token caches once, which no later run repeats (a lesson measured at load 18
        waited 45 s for it, 5× the later loads, and its estimate at 60 s was 11× the actual).
        """
        seconds = max(0.0, now - self.boundary) if math.isfinite(now) else 0.0
        self.boundary = now if math.isfinite(now) else self.boundary
        units = min(units, run.left.get(kind, 0.0)) if units else 0.0
        run.left[kind] = run.left.get(kind, 0.0) - units
        if kind == run.stage_kind:
            run.stage_seconds += seconds
        if paced:
            self.pieces.append((now, seconds, units * self.profile.seconds(kind), kind, units))

    # -- reading -------------------------------------------------------------------------------
    def speed(self, now: float) -> float:
        """Measured seconds per reference second (1.0 before anything is measured), recent work weighted most."""
        measured = reference = 0.0
        for at, seconds, ref, _, _ in self.pieces:
            weight = math.exp(-max(0.0, now - at) / MEMORY) if math.isfinite(at) else 1.0
            measured, reference = measured + weight * seconds, reference + weight * ref
        return measured / reference if reference > 0 and measured > 0 else 1.0

    def measured(self) -> dict[str, float]:
        """Seconds per unit of each kind measured so far (the profile a later lesson could use)."""
        spent: dict[str, list[float]] = {}
        for _, seconds, _, kind, units in self.pieces:
            total = spent.setdefault(kind, [0.0, 0.0])
            total[0], total[1] = total[0] + seconds, total[1] + units
        return {kind: seconds / units for kind, (seconds, units) in spent.items() if units > 0}

    def seconds_left(self, now: float) -> float:
        """Estimated seconds until the last run ends (0 once it has)."""
        if self.index >= len(self.runs):
            return 0.0
        s = self.speed(now)
        left = 0.0
        for number, run in enumerate(self.runs[self.index:]):
            for kind, units in run.left.items():
                unit = s * self.profile.seconds(kind)
                if number == 0 and kind == run.stage_kind and run.stage_done >= 1 and kind.startswith("layer:"):
                    own = run.stage_seconds / run.stage_done
                    weight = run.stage_done / (run.stage_done + OWN_PACE_AFTER)
                    unit = weight * own + (1 - weight) * unit
                left += units * unit
        return max(0.0, left - max(0.0, now - self.boundary))

    def fraction(self, now: float) -> float:
        """Elapsed / (elapsed + left), in [0, 1]: the lesson's progress bar."""
        elapsed = max(0.0, now - self.started_at)
        total = elapsed + self.seconds_left(now)
        return 1.0 if self.index >= len(self.runs) else (elapsed / total if total > 0 else 0.0)

    def stage_line(self, labels: Mapping[str, str] | None = None) -> str:
        """``Wanda (2 of 4) · pruning layer 7 of 30`` (or ``… · loading the model``), "" once every run ended.

        ``labels`` names the methods as the page does (method → label).
        """
        if self.index >= len(self.runs):
            return ""
        run = self.runs[self.index]
        stage = run.stage
        if run.stage_kind in ("window", "prompt") and run.stage_total:
            what = "window" if run.stage_kind == "window" else "prompt"
            stage = f"{stage} · {what} {min(run.stage_done + 1, run.stage_total)} of {run.stage_total}"
        name = (labels or {}).get(run.method, run.method)
        return f"{name} ({self.index + 1} of {len(self.runs)} to run) · {stage}"


def _replace(profile: Profile, **changes: int) -> Profile:
    from dataclasses import replace

    return replace(profile, **changes)
