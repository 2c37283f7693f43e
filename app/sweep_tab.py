"""The Sweep tab: methods × sparsities × bit widths × allocations on one model and protocol, drawn point by point.

Two curves: perplexity vs sparsity (one line per method and allocation: uniform, OWL), and
perplexity vs bits per weight (scales counted) for the quantized points (sweep int2/int3/int4 at a
fixed method for the bits curve). With two or more calibration seeds every point runs once per seed
and is drawn at its mean with ± std error bars. "Permute inputs (n:m)" runs every n:m point with its
inputs permuted (on), or with and without (both): a permuted point is labelled ``2:4+perm``. Before
Run, the form shows how long the sweep should take (:func:`toolkit.sweep.estimate`), redrawn whenever
the form changes. Under the results, the run store's frontier (perplexity against decode speed,
:mod:`app.frontier_view`).

:func:`sweep_stream` is the handler's logic as a plain generator (tests drive it): plan the
configs (:func:`toolkit.sweep.plan`), wait for the device, then follow :func:`toolkit.sweep.run_sweep`
in a job; runs already in the store under the same protocol are reused, not recomputed.
"""

import math
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app import forms, frontier_view, howto
from app.howto import Plot
from app.jobs import DONE, SESSIONS, Job, device_queue
from app.run_tab import PERIOD, _wait_turn, error_status, session_of
from toolkit.api import RunConfig
from toolkit.errors import ToolkitError
from toolkit.events import Event, RunStarted
from toolkit.figures import quant as viz_quant
from toolkit.figures import sweep as viz_sweep
from toolkit.live.phase import progress_line
from toolkit.live.view import RunView
from toolkit.spec.targets import NM, Unstructured, parse_sparsity
from toolkit.store.runs import list_runs
from toolkit.sweep import (
    COLUMNS,
    PERMUTED,
    SweepPoint,
    dense_reference,
    estimate,
    parse_seeds,
    plan,
    run_sweep,
    write_csv,
)

DEFAULT_SPARSITIES = ("10%", "30%", "50%", "70%", "2:4")
DEFAULT_METHODS = ("magnitude", "wanda", "sparsegpt")
DEFAULT_BITS = ("none",)
ALLOCATIONS = {"uniform": "uniform", "OWL": "owl"}  # checkbox label → --allocation (OWL at its defaults M=5, λ=0.08)
PERMUTE_CHOICES = {"off": (False,), "on": (True,), "both": (False, True)}  # choice → --permute of each n:m point


@dataclass
class SweepSettings:
    """The Sweep form."""

    model: str = "smollm2-135m"
    model_path: str = ""
    methods: list[str] = field(default_factory=lambda: list(DEFAULT_METHODS))
    sparsities: list[str] = field(default_factory=lambda: list(DEFAULT_SPARSITIES))
    bits: list[str] = field(default_factory=lambda: list(DEFAULT_BITS))  # "none" = not quantized
    allocations: list[str] = field(default_factory=lambda: ["uniform"])  # labels of ALLOCATIONS
    protocol: forms.Protocol = field(default_factory=forms.Protocol)
    seeds: str = ""  # calibration seeds "0, 1, 2" (two or more) for mean ± std; "" = the protocol's seed only
    permute: str = "off"  # a key of PERMUTE_CHOICES: the n:m points unpermuted, permuted, or both


def sweep_configs(settings: SweepSettings, runs_dir: str) -> tuple[list[RunConfig], list[str]]:
    """Validate the form into the sweep's configs (and notes on pairs skipped)."""
    if not settings.methods:
        raise ToolkitError("pick at least one method")
    if not settings.sparsities:
        raise ToolkitError("pick at least one sparsity (none = quantize only)")
    if not settings.bits:
        raise ToolkitError("pick at least one bit width (none = no quantization)")
    if not settings.allocations:
        raise ToolkitError("pick at least one allocation (uniform spreads the sparsity evenly)")
    unknown = [name for name in settings.allocations if name not in ALLOCATIONS]
    if unknown:
        raise ToolkitError(f"unknown allocation {unknown[0]!r}: pick from {', '.join(ALLOCATIONS)}")
    protocol = forms.protocol_fields(settings.protocol)
    protocol["eval_data"] = protocol["eval_data"] or "wiki"  # a sweep always measures perplexity
    # the base carries the model and protocol only: plan() sets each config's method and compression
    base = RunConfig(model=forms.model_name(settings.model, settings.model_path), method="magnitude",
                     sparsity=Unstructured(0.5), **protocol, eval_dense=True, out_dir=runs_dir)
    quants = [None if bits == "none" else bits for bits in settings.bits]
    return plan(base, settings.methods, sweep_sparsities(settings), quants,
                [ALLOCATIONS[name] for name in settings.allocations], parse_seeds(settings.seeds))


def sweep_sparsities(settings: SweepSettings) -> list[str]:
    """The form's sparsities with the permute choice applied: each n:m one as ``2:4+perm``, or both ways.

    Raises :class:`ToolkitError` for an unknown choice, and for permuting a sweep without an n:m
    sparsity (the command line's refusal of ``--permute`` without n:m, for the whole sweep).
    """
    if settings.permute not in PERMUTE_CHOICES:
        raise ToolkitError(f"unknown permute choice {settings.permute!r}: pick {', '.join(PERMUTE_CHOICES)}")
    permutes = PERMUTE_CHOICES[settings.permute]
    nm = {text for text in settings.sparsities if text != "none" and isinstance(parse_sparsity(text), NM)}
    if any(permutes) and not nm:
        raise ToolkitError(f"--permute spreads the important inputs over the groups of n:m sparsity; the sweep's "
                           f"sparsities ({', '.join(settings.sparsities)}) have none: tick 2:4 or 4:8, or set "
                           "--permute to off")
    return [text + (PERMUTED if permute else "") for text in settings.sparsities
            for permute in (permutes if text in nm else (False,))]


def estimate_line(settings: SweepSettings, runs_dir: str) -> str:
    """The form's time estimate (``**Estimate** ≈ 6 min for 9 runs …``), or the one line saying what to change."""
    try:
        configs, _ = sweep_configs(settings, runs_dir)
    except ToolkitError as exc:
        return error_status(str(exc))
    return f"**Estimate** {estimate(configs, list_runs(runs_dir)).line}"


def table(points: list[SweepPoint]) -> list[list[Any]]:
    """Rows of the results table (:data:`toolkit.sweep.COLUMNS`)."""
    rows = []
    for point in points:
        data = point.to_dict()
        rows.append([_cell(data[column]) for column in COLUMNS])
    return rows


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return None if not math.isfinite(value) else round(value, 4)
    return value


def _view(points: list[SweepPoint], total: int, current: RunView, now: float, notes: list[str]) -> dict[str, Any]:
    reused = sum(p.reused for p in points)
    head = f"**{len(points)} of {total} points** ({reused} reused from the run store)"
    if current.status == "running":
        head += f" · now {current.method} {current.sparsity}: {progress_line(current, now)}"
    failed = [f"{p.method} {p.sparsity}{'' if p.allocation == 'uniform' else ' ' + p.allocation}: {p.error}"
              for p in points if p.status == "failed"]
    lines = [head, *(f"⚠ {line}" for line in failed), *(f"skipped: {note}" for note in notes)]
    rows = [p.to_dict() for p in points]
    dense = dense_reference(points)
    update = {"status": "\n\n".join(lines), "table": table(points),
              "curve": viz_sweep.sweep_figure(rows, dense_ppl=dense, revision="sweep"),
              "bits_curve": viz_quant.bits_figure([p for p in rows if p["quant"]], dense_ppl=dense, revision="bits")}
    if any(math.isfinite(p.accuracy) for p in points):  # the sweep scored zero-shot tasks
        update["accuracy"] = viz_sweep.sweep_figure(rows, dense_ppl=dense_reference(points, "dense_accuracy"),
                                              title="mean zero-shot accuracy vs sparsity", revision="sweep-accuracy",
                                              metric="accuracy")
    return update


def sweep_stream(settings: SweepSettings, *, runs_dir: str, session: str = "local",
                 clock: Callable[[], float] = time.monotonic) -> Iterator[dict[str, Any]]:
    """Run the sweep; yields ``{status, curve, table, csv}`` updates (a point redraws the curve)."""
    try:
        configs, notes = sweep_configs(settings, runs_dir)
    except ToolkitError as exc:
        yield {"status": error_status(str(exc)), "notice": str(exc), "estimate": error_status(str(exc))}
        return
    yield {"estimate": f"**Estimate** {estimate(configs, list_runs(runs_dir)).line}"}
    job = SESSIONS.begin(session, "sweep")
    line = device_queue(configs[0].device)
    ticket = line.join()
    try:
        yield from _wait_turn(job, line, ticket, configs[0])
        if job.token.cancelled:
            yield {"status": "**■ cancelled** while waiting in the queue; nothing was run."}
            return
        job.start(lambda: run_sweep(configs, job.token), on_exit=lambda: line.leave(ticket))
        yield from _follow(job, configs, notes, clock)
    finally:
        job.stream_closed(line, ticket)


def _follow(job: Job, configs: list[RunConfig], notes: list[str], clock: Callable[[], float]) -> Iterator[dict]:
    points: list[SweepPoint] = []
    current, errors = RunView(), []
    yield {**_view(points, len(configs), current, clock(), notes), "csv": None}
    next_tick, drawn = clock() + PERIOD, 0
    while True:
        item = job.get(next_tick - clock())
        if item is DONE:
            break
        if isinstance(item, SweepPoint):
            points.append(item)
            current = RunView()
        elif isinstance(item, tuple) and item and item[0] == "error":
            errors.append(item[1])
        elif isinstance(item, Event):
            if isinstance(item, RunStarted):
                current = RunView()
            current.apply(item, clock())
        if clock() >= next_tick:
            update = _view(points, len(configs), current, clock(), notes)
            if len(points) == drawn:  # only the status line changed
                update = {"status": update["status"]}
            drawn = len(points)
            yield update
            next_tick = clock() + PERIOD
    final = _view(points, len(configs), RunView(), clock(), notes)
    cancelled = any(p.status == "cancelled" for p in points)
    final["status"] = ("**■ sweep cancelled** · " if cancelled else "**✓ sweep done** · ") + final["status"]
    if errors:
        final["status"] += "\n\n" + "\n\n".join(error_status(e) for e in errors)
    if points:
        folder = Path(tempfile.mkdtemp(prefix="prunelab-sweep-"))
        final["csv"] = str(write_csv(points, folder / "sweep.csv"))
    yield final


def build(gr: Any, *, default_model: str, runs_dir: str) -> dict[str, Any]:
    """Lay out the Sweep tab inside the current Blocks and wire it."""
    from app.controls import model_controls, protocol_controls
    from app.figure_download import export_button

    names = list(forms.method_table())
    with gr.Row():
        with gr.Column(scale=1, min_width=340):
            model, model_path = model_controls(gr, default_model, prefix="sweep")
            methods = gr.CheckboxGroup(names, value=[m for m in DEFAULT_METHODS if m in names], label="Methods",
                                       elem_id="sweep-methods")
            sparsities = gr.CheckboxGroup(list(forms.SWEEP_SPARSITIES), value=list(DEFAULT_SPARSITIES),
                                          label="Sparsities", elem_id="sweep-sparsities")
            bits = gr.CheckboxGroup(list(forms.SWEEP_BITS), value=list(DEFAULT_BITS), elem_id="sweep-bits",
                                    label="Bits (group 128; quantizing methods only)")
            allocations = gr.CheckboxGroup(list(ALLOCATIONS), value=["uniform"], elem_id="sweep-allocations",
                                           label="Layer allocation (each sparsity with each; OWL: unstructured only)")
            seeds = gr.Textbox("", label="Calibration seeds (two or more, e.g. 0, 1, 2: mean ± std per point; "
                                         "empty: one run per point)", elem_id="sweep-seeds")
            permute = gr.Radio(list(PERMUTE_CHOICES), value="off", label=forms.PERMUTE_LABEL, elem_id="sweep-permute",
                               info="on: every n:m point with its inputs permuted (2:4+perm); both: each n:m "
                                    "point with and without")
            with gr.Accordion("Calibration, evaluation, device", open=False):
                protocol = protocol_controls(gr, evaluate_toggle=False, prefix="sweep")
            timing = gr.Markdown(estimate_line(SweepSettings(model=default_model), runs_dir), elem_id="sweep-estimate")
            with gr.Row():
                start = gr.Button("Run sweep", variant="primary", elem_id="sweep-button")
                stop = gr.Button("Cancel", variant="stop", elem_id="sweep-cancel")
        with gr.Column(scale=3):
            status = gr.Markdown("Pick methods and sparsities, then **Run sweep**. Runs already in the store "
                                 "with the same protocol are reused.", elem_id="sweep-status")
            with gr.Row():
                curve = gr.Plot(viz_sweep.sweep_figure([]), show_label=False, elem_id="sweep-curve")
                accuracy = gr.Plot(viz_sweep.sweep_figure([], title="mean zero-shot accuracy vs sparsity",
                                                    metric="accuracy"), show_label=False, elem_id="sweep-accuracy")
            seeds_note = ("**Seeds**: with two or more calibration seeds each point is the mean of its runs and its "
                          "bar ± one sample standard deviation (n − 1): a gap between two methods smaller than "
                          "their bars is within calibration noise.")
            permute_note = ("**Permuted inputs**: an open diamond (2:4+perm, \"n:m, permuted\" in the legend) is an "
                            "n:m point run with each linear's inputs permuted; beside the filled diamond of the same "
                            "method it shows how the permutation changed the perplexity.")
            howto.accordions(gr, "sweep", Plot.SWEEP, Plot.ACCURACY,
                             extra={Plot.SWEEP: f"{seeds_note}\n\n{permute_note}", Plot.ACCURACY: seeds_note})
            export_button(gr, curve, "sweep")
            bits_curve = gr.Plot(viz_quant.bits_figure([]), show_label=False, elem_id="sweep-bits-curve")
            howto.accordions(gr, "sweep", Plot.BITS)
            results = gr.Dataframe(headers=list(COLUMNS), value=[], interactive=False, label="Results",
                                   elem_id="sweep-table")
            csv = gr.File(label="Results as CSV", interactive=False, elem_id="sweep-csv")
            frontier = frontier_view.build(gr, runs_dir=runs_dir)
    outputs = {"status": status, "curve": curve, "accuracy": accuracy, "bits_curve": bits_curve, "table": results,
               "csv": csv, "estimate": timing}
    fields = {model, model_path, methods, sparsities, bits, allocations, seeds, permute, *protocol.components}

    def read(data: dict) -> SweepSettings:
        return SweepSettings(model=data[model], model_path=data[model_path], methods=list(data[methods] or []),
                             sparsities=list(data[sparsities] or []), bits=list(data[bits] or []),
                             allocations=list(data[allocations] or []), protocol=protocol.read(data),
                             seeds=str(data[seeds] or ""), permute=str(data[permute] or "off"))

    # gr is the gradio module, passed in (not a type to pyright); Gradio reads this annotation
    def handler(data: dict, request: gr.Request) -> Iterator[dict]:  # pyright: ignore[reportInvalidTypeForm]
        for update in sweep_stream(read(data), runs_dir=runs_dir, session=session_of(request)):
            notice = update.pop("notice", None)
            if notice:
                gr.Warning(notice)
            yield {outputs[key]: value for key, value in update.items()}

    # gr is the gradio module, passed in (not a type to pyright); Gradio reads this annotation
    def cancel(request: gr.Request) -> str:  # pyright: ignore[reportInvalidTypeForm]
        job = SESSIONS.get(session_of(request), "sweep")
        if job is None or job.finished.is_set():
            return "Nothing to cancel: no sweep is going on in this tab."
        job.cancel()
        job.finished.wait(20.0)
        return "**■ sweep cancelled**; finished points stay in the run store and are reused next time."

    event = start.click(handler, inputs=fields, outputs=list(outputs.values()), concurrency_limit=16,
                        show_progress="hidden")
    event.then(lambda: frontier_view.frontier_view(runs_dir), inputs=None,  # the sweep's runs join the frontier
               outputs=[frontier["frontier"], frontier["frontier_summary"]], show_progress="hidden")
    for changed in fields:  # the estimate follows the form before Run
        changed.change(lambda data: estimate_line(read(data), runs_dir), inputs=fields, outputs=timing,
                       show_progress="hidden", queue=False)
    stop.click(cancel, inputs=None, outputs=status, cancels=[event], concurrency_limit=None, show_progress="hidden")
    return outputs
