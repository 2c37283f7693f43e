"""Sweeps: methods × sparsities × bit widths × allocations on one model and protocol, reusing stored runs.

:func:`plan` turns a base :class:`~toolkit.api.RunConfig` into one config per (method, sparsity,
grid, allocation) the method supports; :func:`run_sweep` runs them in order, yielding each run's live events and a
:class:`SweepPoint` when a run ends. A config whose experiment is already in the run store
(:func:`toolkit.api.find_finished` on :meth:`RunConfig.reuse_key`) is reused, not recomputed.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math
import statistics
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from toolkit.api import CancelToken, RunConfig, find_finished, follow, open_run
from toolkit.errors import ToolkitError
from toolkit.events import Event
from toolkit.methods import get_method
from toolkit.spec.allocation import UNIFORM, Allocation, parse_allocation
from toolkit.spec.compression import Compression, QuantSpec, parse_quant, target_kind
from toolkit.spec.targets import Target, parse_sparsity
from toolkit.store.runs import last_stamp

COLUMNS = ("method", "sparsity", "achieved_sparsity", "ppl", "dense_ppl", "prune_seconds", "status", "reused", "run_id",
           "pattern", "quant", "bits_per_weight", "accuracy", "dense_accuracy", "allocation", "seed", "permute")


@dataclass(frozen=True)
class SweepPoint:
    """One (method, sparsity) of a sweep: its perplexity (and mean zero-shot accuracy), or why there is none.

    ``sparsity`` is the compression's label; ``pattern`` the kind of its sparsity target
    (``unstructured`` | ``nm`` | ``structured`` | ``none``), so a chart groups points without
    reading the label. ``permute``: the run's inputs were permuted for n:m (``--permute``; its label
    ends in ``+perm``).
    """

    method: str
    sparsity: str
    pattern: str = "unstructured"
    achieved_sparsity: float = math.nan
    ppl: float = math.nan
    dense_ppl: float = math.nan
    accuracy: float = math.nan  # mean over the run's zero-shot tasks of the headline metric (nan: no tasks)
    dense_accuracy: float = math.nan
    prune_seconds: float = math.nan
    status: str = "finished"  # finished | failed | cancelled
    reused: bool = False
    run_id: str = ""
    error: str = ""
    quant: str = ""  # the grid's label (int4:g128), "" when not quantized
    bits_per_weight: float = math.nan  # storage bits per linear weight, scales and zero points counted
    allocation: str = "uniform"  # how the sparsity was spread over the layers: uniform | owl:M,λ | a file
    seed: int = 0  # the calibration seed (points of one sparsity over several seeds give a mean ± std)
    permute: bool = False  # n:m with each linear's inputs permuted (--permute)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (the figure builders and the CSV take these)."""
        return dataclasses.asdict(self)


def plan(
    base: RunConfig, methods: Sequence[str], sparsities: Sequence[str | Target | None],
    quants: Sequence[str | QuantSpec | None] = (None,), allocations: Sequence[str | Allocation] = (UNIFORM,),
    seeds: Sequence[int] = (),
) -> tuple[list[RunConfig], list[str]]:
    """Configs for every (method, sparsity, grid, allocation) a method supports, and a note for each one skipped.

    ``sparsities`` are targets, the user's text (parsed once, here) or None/"none" (quantize only); an
    n:m text with ``+perm`` (``2:4+perm``) runs with ``--permute`` (on another, its refusal). ``quants``
    are grids (``int4``, ``int3:g64``) or None (no quantization): the perplexity vs bits curve.
    ``allocations`` (``uniform``, ``owl``, ``owl:M,λ``; docs/allocation.md) runs each sparsity once per
    allocation: one curve per allocation; a non-uniform one only pairs with unstructured sparsities
    (the others are skipped with RunConfig's reason). ``seeds`` (:func:`parse_seeds`: none, or two or
    more) repeats every point once per calibration seed, for a mean ± std; none keeps the base's seed. Every config
    measures the dense perplexity too (``eval_dense``; cached after the first). Raises
    :class:`ToolkitError` when nothing is left, for an unreadable allocation, or when the base has
    no evaluation.
    """
    if base.eval_data is None:
        raise ToolkitError("a sweep needs evaluation on: it plots perplexity")
    targets = [_sparsity(s) for s in sparsities]
    grids = [parse_quant(q) for q in quants]
    spreads = list(dict.fromkeys(parse_allocation(a) for a in allocations or (UNIFORM,)))
    configs, skipped = [], []
    for method in methods:
        get_method(method)  # an unknown name is the user's mistake, not a pair to skip
        for (target, permute), grid, spread, seed in itertools.product(targets, grids, spreads,
                                                                       seeds or (base.seed,)):
            try:
                configs.append(dataclasses.replace(base, method=method, sparsity=target, quant=grid,
                                                   allocation=spread, eval_dense=True, seed=seed, permute=permute))
            except ToolkitError as exc:  # the method cannot meet this spec: say so, sweep the rest
                if seed == (seeds or (base.seed,))[0]:  # one note per pair, not one per seed
                    skipped.append(_skip_note(method, target, grid, spread, permute, exc))
    if not configs:
        raise ToolkitError("nothing to sweep: pick at least one method and one sparsity or bit width it supports")
    return configs, skipped


PERMUTED = "+perm"  # a sweep sparsity with this suffix runs with --permute (the compression label's suffix)


def _sparsity(text: str | Target | None) -> tuple[Target | None, bool]:
    """A sweep sparsity as (target, permute): ``2:4+perm`` → (NM(2, 4), True); ``none`` → (None, False)."""
    if text is None or text == "none":
        return None, False
    if isinstance(text, str) and text.endswith(PERMUTED):
        target = parse_sparsity(text.removesuffix(PERMUTED))
        Compression(target, permute=True)  # not n:m: the command line's refusal for --permute (ToolkitError)
        return target, True
    return parse_sparsity(text), False


def _skip_note(method: str, target: Target | None, grid: QuantSpec | None, spread: Allocation, permute: bool,
               exc: ToolkitError) -> str:
    """The note of a (method, spec) pair the method cannot run (RunConfig's reason)."""
    label = "+".join([str(x) for x in (target, grid) if x is not None] + (["perm"] if permute else [])) or "nothing"
    return f"{method} {label}{'' if spread.uniform else f' ({spread.label})'}: {exc}"


class _Labels(TypedDict):
    sparsity: str
    pattern: str
    quant: str
    allocation: str
    seed: int
    permute: bool


def _labels(config: RunConfig, ran: dict[str, Any] | None = None) -> _Labels:
    """``sparsity`` (the compression's label, ``2:4+perm`` when permuted), ``pattern`` and the rest of a config's point.

    ``ran`` is the compression as the run recorded it (RunStarted, result.json): its labels name a
    quantization group fitted to the model (``int4`` → ``int4:g64``), which the config does not know.
    """
    pattern = "none" if config.sparsity is None else target_kind(config.sparsity)
    ran = ran if ran and ran.get("label") else config.compression.to_dict()
    return {"sparsity": ran["label"], "pattern": pattern, "quant": (ran.get("quant") or {}).get("label", ""),
            "allocation": parse_allocation(config.allocation).label, "seed": config.seed, "permute": config.permute}


def point_from_result(config: RunConfig, result: dict[str, Any], *, reused: bool) -> SweepPoint:
    """The point of a finished run's result dict (result.json)."""
    data = config.eval_data or ""
    ppl, dense = result.get("ppl") or {}, result.get("dense_ppl") or {}
    return SweepPoint(method=config.method, **_labels(config, result.get("compression")),
                      achieved_sparsity=_num(result.get("achieved_sparsity")), ppl=_num(ppl.get(data)),
                      dense_ppl=_num(dense.get(data)), **mean_accuracy(result),
                      prune_seconds=_num(result.get("prune_seconds")), reused=reused,
                      run_id=str(result.get("run_id", "")),
                      bits_per_weight=_num((result.get("accounting") or {}).get("bits_per_weight")))


class _Accuracy(TypedDict):
    accuracy: float
    dense_accuracy: float


def mean_accuracy(result: dict[str, Any]) -> _Accuracy:
    """``accuracy`` and ``dense_accuracy`` of a result dict: its zero-shot means (nan without tasks)."""
    entry = result.get("zero_shot")
    mean = entry.get("mean") if isinstance(entry, dict) else None
    mean = mean if isinstance(mean, dict) else {}
    return {"accuracy": _num(mean.get("pruned")), "dense_accuracy": _num(mean.get("dense"))}


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def run_sweep(configs: Sequence[RunConfig], cancel: CancelToken | None = None) -> Iterator[Event | SweepPoint]:
    """Run (or reuse) each config in order; yield its events, then its :class:`SweepPoint`.

    A run that fails yields a point with status "failed" and the sweep goes on; a cancelled
    run yields a "cancelled" point and ends the sweep.
    """
    cancel = cancel or CancelToken()
    for config in configs:
        if cancel.cancelled:
            yield SweepPoint(method=config.method, **_labels(config), status="cancelled", error="cancelled")
            return
        record = find_finished(config.out_dir, config.reuse_key())
        if record is not None and isinstance(record.result, dict):
            yield point_from_result(config, {**record.result, "run_id": record.run_id}, reused=True)
            continue
        point = yield from _run_one(config, cancel)
        yield point
        if point.status == "cancelled":
            return


def _run_one(config: RunConfig, cancel: CancelToken) -> Generator[Event, None, SweepPoint]:
    """Drive one run to its end, yielding its events; returns (via StopIteration) its SweepPoint."""
    outcome = yield from follow(config, cancel)
    finished, ran = outcome.finished, outcome.started.compression if outcome.started is not None else None
    if finished is not None:
        data = config.eval_data or ""
        stored = open_run(Path(config.out_dir) / outcome.run_id).result if config.tasks else None
        return SweepPoint(method=config.method, **_labels(config, ran), achieved_sparsity=finished.achieved_sparsity,
                          ppl=_num(finished.ppl.get(data)), dense_ppl=_num(finished.dense_ppl.get(data)),
                          **mean_accuracy(stored or {}), prune_seconds=finished.prune_seconds, run_id=outcome.run_id,
                          bits_per_weight=_num(finished.bits_per_weight))
    if outcome.refused:
        return SweepPoint(method=config.method, **_labels(config), status="failed", error=outcome.refused)
    return SweepPoint(method=config.method, **_labels(config), status=outcome.status, run_id=outcome.run_id,
                      error=outcome.error)


def dense_reference(points: Sequence[SweepPoint], field: str = "dense_ppl") -> float | None:
    """The dense value of ``field`` (dense_ppl | dense_accuracy) measured by any point (they share the protocol)."""
    for point in points:
        value = getattr(point, field)
        if math.isfinite(value):
            return value
    return None


def write_csv(points: Sequence[SweepPoint], path: str | Path) -> Path:
    """Write the sweep table (one row per point, :data:`COLUMNS`) to ``path``; returns it."""
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*COLUMNS, "error"])
        writer.writeheader()
        for point in points:
            writer.writerow(point.to_dict())
    return path


def stored_points(records: Sequence[Any], model: str | None = None) -> list[SweepPoint]:
    """Points of the finished runs in ``records`` (optionally of one ``model``), for a sweep chart."""
    points = []
    for record in records:
        config, result = record.config, record.result
        if record.status != "finished" or not isinstance(config, dict) or not isinstance(result, dict):
            continue
        if model is not None and config.get("model") != model:
            continue
        data = config.get("eval_data") or ""
        ppl, dense = result.get("ppl") or {}, result.get("dense_ppl") or {}
        compression = record.compression
        sparsity = compression.get("sparsity")
        pattern = sparsity.get("kind", "unknown") if isinstance(sparsity, dict) else "none"
        quant = compression.get("quant")
        points.append(SweepPoint(method=str(config.get("method")), sparsity=str(compression.get("label")),
                                 allocation=str(config.get("allocation") or UNIFORM), seed=_seed(config),
                                 permute=bool(compression.get("permute", False)),
                                 pattern=pattern, quant=str(quant.get("label", "")) if isinstance(quant, dict) else "",
                                 bits_per_weight=_num((result.get("accounting") or {}).get("bits_per_weight")),
                                 achieved_sparsity=_num(result.get("achieved_sparsity")), ppl=_num(ppl.get(data)),
                                 dense_ppl=_num(dense.get(data)), **mean_accuracy(result),
                                 prune_seconds=_num(result.get("prune_seconds")), reused=True, run_id=record.run_id))
    return points


def _seed(config: dict[str, Any]) -> int:
    seed = _num(config.get("seed"))
    return int(seed) if math.isfinite(seed) else 0


MAX_SEEDS = 20


def parse_seeds(text: str | None) -> tuple[int, ...]:
    """Calibration seeds typed as ``0, 1, 2`` (commas or spaces): () for an empty field, else two or more.

    A spread needs at least two seeds: one seed, a repeated seed, a negative or non-whole number
    raises :class:`ToolkitError` with one line saying what to type.

    >>> parse_seeds("0, 1 2")
    (0, 1, 2)
    >>> parse_seeds("  ")
    ()
    """
    words = (text or "").replace(",", " ").split()
    if not words:
        return ()
    bad = next((word for word in words if not word.isdigit()), None)
    if bad is not None:
        raise ToolkitError(f"calibration seeds are whole numbers ≥ 0 separated by commas, got {bad!r}; type 0, 1, 2")
    seeds = [int(word) for word in words]
    if len(seeds) < 2:
        raise ToolkitError(f"a spread needs at least two calibration seeds, got one ({seeds[0]}); type e.g. "
                           f"{seeds[0]}, {seeds[0] + 1}, {seeds[0] + 2}, or leave Seeds empty for one run per point")
    if len(set(seeds)) < len(seeds):
        raise ToolkitError(f"calibration seed {next(s for s in seeds if seeds.count(s) > 1)} is listed twice; "
                           "list each seed once")
    if len(seeds) > MAX_SEEDS:
        raise ToolkitError(f"{len(seeds)} seeds; at most {MAX_SEEDS} per sweep")
    return tuple(seeds)


DEFAULT_RUN_SECONDS = 60.0  # a run's wall time when the store has no finished run of the model to go by
HISTORY = 5  # most recent finished runs of a model and method the estimate takes the median of


@dataclass(frozen=True)
class Estimate:
    """How long a sweep should take before it starts: runs to compute, runs reused, seconds, and on what basis."""

    runs: int
    reused: int
    seconds: float
    basis: tuple[str, ...]  # one phrase per method: "wanda: median of 3 stored runs, 41 s each"

    @property
    def line(self) -> str:
        """``≈ 6 min for 9 runs (3 reused) · wanda: …`` (one line for the form)."""
        reused = f" ({self.reused} more reused from the run store)" if self.reused else ""
        if not self.runs:
            return f"≈ nothing to compute: all {self.reused} points are in the run store"
        return f"≈ {_duration(self.seconds)} for {self.runs} runs{reused} · " + "; ".join(self.basis)


def run_wall_seconds(record: Any) -> float:
    """A finished run's wall time in seconds (nan if unknown).

    The last event's stamp (seconds since the run record was created, :data:`toolkit.store.runs.STAMP`:
    the whole run but loading the model); for runs from before stamps, from the id's start stamp to
    result.json's ``finished_at`` (which leaves out the pruned evaluation, so it is shorter).
    """
    last = last_stamp(record.path) if getattr(record, "path", None) else math.nan
    if math.isfinite(last) and last > 0:
        return last
    result = record.result if isinstance(record.result, dict) else {}
    try:
        start = time.mktime(time.strptime(record.run_id[:15], "%Y%m%d-%H%M%S"))
        end = time.mktime(time.strptime(str(result.get("finished_at")), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return math.nan
    return end - start if end > start else math.nan


def _tokens(config: Any) -> float:
    """Calibration tokens of a RunConfig or a stored config dict (nsamples × seqlen)."""
    data = config if isinstance(config, dict) else {"nsamples": config.nsamples, "seqlen": config.seqlen}
    return _num(data.get("nsamples")) * _num(data.get("seqlen"))


def per_run_seconds(config: RunConfig, records: Sequence[Any]) -> tuple[float, str]:
    """Seconds one run of ``config`` should take, from the store's finished runs of its model and method.

    The median wall time of the :data:`HISTORY` most recent such runs, each scaled by the ratio of
    calibration tokens (``config``'s over the run's); without one, :data:`DEFAULT_RUN_SECONDS`.
    Returns (seconds, the basis in words).
    """
    scaled = []
    for record in sorted(records, key=lambda r: r.run_id, reverse=True):
        stored = record.config if isinstance(record.config, dict) else {}
        if record.status != "finished" or stored.get("model") != config.model or stored.get("method") != config.method:
            continue
        wall, tokens = run_wall_seconds(record), _tokens(stored)
        ratio = _tokens(config) / tokens if tokens > 0 else math.nan  # nan: a run without its protocol
        if math.isfinite(wall) and math.isfinite(ratio) and ratio > 0:
            scaled.append(wall * ratio)
        if len(scaled) == HISTORY:
            break
    if not scaled:
        return DEFAULT_RUN_SECONDS, f"{config.method}: {DEFAULT_RUN_SECONDS:.0f} s a run (no finished run of it yet)"
    seconds = statistics.median(scaled)
    return seconds, (f"{config.method}: {_duration(seconds)} a run (median of {len(scaled)} stored run"
                     f"{'s' if len(scaled) > 1 else ''}, scaled by calibration tokens)")


def estimate(configs: Sequence[RunConfig], records: Sequence[Any]) -> Estimate:
    """The sweep's time before it starts: each config not already in ``records`` × its :func:`per_run_seconds`.

    ``records`` are the run store's (:func:`toolkit.api.list_runs` of the configs' ``out_dir``).
    """
    total, reused, runs, basis = 0.0, 0, 0, {}
    done = [r for r in records if r.status == "finished" and isinstance(r.config, dict)]
    for config in configs:
        key = config.reuse_key()  # as find_finished matches it, on the records already read
        if any(all(record.config.get(k) == v for k, v in key.items()) for record in done):
            reused += 1
            continue
        seconds, words = per_run_seconds(config, records)
        total, runs = total + seconds, runs + 1
        basis.setdefault(config.method, words)
    return Estimate(runs=runs, reused=reused, seconds=total, basis=tuple(basis.values()))


def _duration(seconds: float) -> str:
    """``45 s``, ``6 min``, ``1 h 20 min``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60} min"
