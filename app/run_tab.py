"""The Run tab: pick model, method, options, sparsity, quantization and protocol; watch the run live.

:func:`run_stream` is the handler's logic as a plain generator of ``{output name: value}`` dicts
(the tests drive it directly): validate the form, wait for the device (showing the queue
position), follow :func:`toolkit.api.run` in a :class:`~app.jobs.Job`, and yield a refresh at
most every :data:`PERIOD` seconds, with only the figures that changed. :func:`build` lays the
tab out and wires it.
"""

import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from app import forms, howto, views
from app.howto import Plot
from app.jobs import DONE, SESSIONS, Job, cancel_and_wait, device_queue
from app.page_words import page_words
from toolkit.api import RunConfig, run
from toolkit.errors import ToolkitError
from toolkit.events import Event, RunStarted
from toolkit.figures.registry import ROWS, RUN_FIGURES
from toolkit.live.view import RunView

log = logging.getLogger(__name__)
PERIOD = 0.25  # seconds between refreshes of the status line while a run streams (4 per second)
FIGURE_PERIOD = 0.5  # a figure at most twice a second: a redraw costs the browser far more than text
FIGURES_PER_TICK = 2  # and at most two figures a tick, the longest-waiting first, to keep the page responsive
QUEUE_POLL = 0.5
CLICKED = "**▶ sent** · checking the form and asking for the device…"  # drawn by the page itself on a click
PANEL_MIN_WIDTH = 260  # px: three panels fit a row of the right column at 1280 px and up, a fourth wraps below


def error_status(message: str) -> str:
    """The status line for a message the user must act on, in the page's words (:mod:`app.page_words`)."""
    return f"**⚠ {page_words(message)}**"


def run_stream(settings: forms.RunSettings, *, runs_dir: str, session: str = "local",
               clock: Callable[[], float] = time.monotonic) -> Iterator[dict[str, Any]]:
    """Validate, queue, run and follow one pruning run; yields ``{output name: value}`` updates.

    Closing the generator (Gradio's Cancel / a closed tab) cancels the run or leaves the queue.
    Every failure is one message in ``status``, never an exception (and never a toast besides): input
    the form refuses, and a model that cannot be found, end the stream before anything is queued.
    """
    log.info("run requested by session %s", session)
    try:
        config = forms.to_config(settings, runs_dir)
        forms.check_model_available(config.model)  # a hub id offline or unknown: said now, not after the queue
    except ToolkitError as exc:
        yield {"status": error_status(str(exc))}
        return
    job = SESSIONS.begin(session, "run")
    line = device_queue(config.device)
    ticket = line.join()
    try:
        yield from _wait_turn(job, line, ticket, config)
        if job.token.cancelled:
            yield {"status": "**■ cancelled** while waiting in the queue; nothing was run."}
            return
        job.start(lambda: run(config, job.token), on_exit=lambda: line.leave(ticket))
        yield from _follow(job, clock, Path(runs_dir), config)
    finally:
        log.info("run stream of session %s closed (job %s)", session, job.state)
        job.stream_closed(line, ticket)


def _wait_turn(job: Job, line: Any, ticket: int, config: RunConfig) -> Iterator[dict[str, Any]]:
    """Yield the queue position until this ticket holds the device (or the job is cancelled)."""
    while not job.token.cancelled and not line.try_start(ticket):
        ahead = line.position(ticket)
        yield {"status": f"**… queued** · position {ahead} in line for device `{config.device}` "
                         f"({ahead} run{'s' if ahead != 1 else ''} ahead of you; one pruning at a time)"}
        time.sleep(QUEUE_POLL)


def _follow(job: Job, clock: Callable[[], float], runs_dir: Path, config: RunConfig) -> Iterator[dict[str, Any]]:
    """Fold the job's events into a RunView and yield throttled refreshes, then the final state."""
    view, sent, error = RunView(), None, ""
    yield {"status": f"**▶ starting** · loading {config.model} and the calibration text…", "files": None,
           **{name: views.figure(view, name) for name in views.FIGURES}, "warnings": "", "result": "",
           "generations": "", "visible": views.visible(view)}
    next_tick = clock() + PERIOD
    drawn_at: dict[str, float] = dict.fromkeys(views.FIGURES, -math.inf)
    while True:
        item = job.get(next_tick - clock())
        if item is DONE:
            break
        if isinstance(item, tuple) and item and item[0] == "error":
            error = item[1]
        elif item is not None:  # the job yields events, an ("error", message) tuple, then DONE
            view.apply(cast(Event, item), clock())
            if isinstance(item, RunStarted):
                job.run_id = item.run_id
        if clock() < next_tick:
            continue
        if view.status == "idle":  # still loading: nothing to draw yet, wait for the next tick
            next_tick = clock() + PERIOD
            continue
        now = clock()
        due = sorted((n for n in views.stale(view, sent) if now - drawn_at[n] >= FIGURE_PERIOD),
                     key=drawn_at.__getitem__)
        figures = views.paired(tuple(due[:FIGURES_PER_TICK]))  # the solver panels travel together
        update, sent = views.render(view, now, sent, figures=figures)
        update["visible"] = views.visible(view)
        drawn_at.update(dict.fromkeys(figures, now))
        yield update
        next_tick = clock() + PERIOD
    yield _final(view, error, runs_dir, config)


def _final(view: RunView, error: str, runs_dir: Path, config: RunConfig) -> dict[str, Any]:
    """Everything, once more, plus downloads for a finished run or the message for a failed one."""
    if view.status == "idle":  # refused before it started (n:m width, a model that would not load, ...)
        return {"status": error_status(error or "the run ended before it started")}
    update, _ = views.render(view, time.monotonic())
    update["run_id"], update["visible"] = view.run_id, views.visible(view)
    if error and view.status not in ("failed", "cancelled"):
        update["status"] += f"\n\n**Error:** {page_words(error)}"
    if view.status == "finished":
        update["files"] = views.downloads(runs_dir / view.run_id, include_model=config.save_model)
        update["visible"]["files"] = bool(update["files"])
    return update


def cancel_message(session: str, runs_dir: str, wait: float = 20.0) -> str:
    """Cancel the session's run (or its place in the queue); say how it ended."""
    job = SESSIONS.get(session, "run")
    log.info("cancel requested by session %s (job %s)", session, job and job.state)
    ended = cancel_and_wait(session, "run", runs_dir, wait)
    if ended is None:
        return "Nothing to cancel: no run is going on in this tab."
    job, status = ended
    if not status:
        return "**■ cancelled** before it started; nothing was run."
    if not job.finished.is_set():
        return f"**■ cancelling** run `{job.run_id}`: it stops at the next linear."
    return f"**■ cancelled** · run `{job.run_id}` is marked **{status}** in the run store."


# -- layout and wiring ------------------------------------------------------------------------
def _option_input(gr: Any, option: dict[str, Any]) -> Any:
    label, info = f"{option['name']} ({option['type']})", option["help"] or None
    if option["choices"]:
        return gr.Dropdown(choices=option["choices"], value=option["default"], label=label, info=info)
    if option["type"] == "bool":
        return gr.Checkbox(value=bool(option["default"]), label=label, info=info)
    if option["type"] == "int":
        return gr.Number(value=option["default"], label=label, info=info, precision=0)
    if option["type"] == "float":
        return gr.Number(value=option["default"], label=label, info=info)
    return gr.Textbox(value=str(option["default"]), label=label, info=info)


def _method_controls(gr: Any, methods: dict[str, dict], chosen: str) -> tuple[dict[str, Any], list[tuple]]:
    """A group of option inputs per method (only the chosen method's is visible)."""
    groups, inputs = {}, []
    for name, entry in methods.items():
        with gr.Group(visible=name == chosen) as group:
            if not entry["options"]:
                gr.Markdown(f"*{name} has no options.*")
            for option in entry["options"]:
                inputs.append((name, option["name"], _option_input(gr, option)))
        groups[name] = group
    return groups, inputs


def _summary(entry: dict[str, Any]) -> str:
    patterns = ", ".join(forms.PATTERNS[p] for p in entry["patterns"] if p in forms.PATTERNS) or "none"
    produces = "quantizes" if "quant" in entry.get("produces", ()) else "prunes only (no quantization)"
    units = f" — removes {', '.join(entry['units'])}" if entry.get("units") else ""
    permute = " — n:m with permuted inputs" if entry.get("permute") else ""
    return f"*{entry['summary']}* — patterns: {patterns} — {produces}{units}{permute}"


def _permute_update(gr: Any, method: str, pattern: str) -> Any:
    """The "Permute inputs" box: shown for n:m, enabled only where the method takes it, unticked otherwise."""
    offered = forms.offers_permute(method, pattern)
    return gr.update(visible=forms.shows_nm(pattern), interactive=offered, **({} if offered else {"value": False}))


def _on_method(methods: dict[str, dict], groups: dict[str, Any], gr: Any) -> Callable[..., list[Any]]:
    def update(name: str, pattern: str) -> list[Any]:
        labels = forms.pattern_labels(name) or [forms.NO_SPARSITY]
        keep = pattern if pattern in labels else labels[0]
        entry = methods.get(name)
        units = forms.units(name)
        return [_summary(entry) if entry else "", gr.update(choices=labels, value=keep),
                gr.update(visible=forms.shows_percent(keep)), gr.update(visible=forms.shows_nm(keep)),
                gr.update(visible=bool(units), choices=units, value=units[0] if units else None),
                _permute_update(gr, name, keep), *[gr.update(visible=method == name) for method in groups]]
    return update


@dataclass
class RunForm:
    """The Run tab's input components and how to read them into :class:`forms.RunSettings`."""

    model: Any
    model_path: Any
    method: Any
    summary: Any
    pattern: Any
    percent: Any
    nm: Any
    quant: Any
    group_size: Any
    unit: Any
    groups: dict[str, Any]
    option_inputs: list[tuple[str, str, Any]]
    extra: Any
    protocol: Any
    eval_dense: Any
    save_model: Any
    generate: Any
    run_button: Any
    cancel_button: Any
    allocation: Any  # app.allocation_panel.AllocationControls
    permute: Any = None  # the "Permute inputs (n:m)" box

    @property
    def inputs(self) -> set[Any]:
        """Every component the Run handler reads."""
        return {self.model, self.model_path, self.method, self.pattern, self.percent, self.nm, self.quant,
                self.group_size, self.unit, self.extra, self.permute,
                self.eval_dense, self.save_model, self.generate, *self.protocol.components,
                *self.allocation.inputs, *(box for _, _, box in self.option_inputs)}

    def read(self, data: dict[Any, Any]) -> forms.RunSettings:
        """The form's values (a Gradio ``{component: value}`` dict) as plain settings."""
        name = data[self.method]
        return forms.RunSettings(
            model=data[self.model], model_path=data[self.model_path], method=name, pattern=data[self.pattern],
            percent=data[self.percent], nm=data[self.nm], permute=bool(data[self.permute]), quant=data[self.quant],
            group_size=data[self.group_size], unit=data[self.unit] or "", extra_options=data[self.extra],
            protocol=self.protocol.read(data), eval_dense=bool(data[self.eval_dense]),
            save_model=bool(data[self.save_model]), generate=bool(data[self.generate]),
            options={option: data[box] for owner, option, box in self.option_inputs if owner == name},
            allocation=self.allocation.read(data))


def _form(gr: Any, default_model: str, methods: dict[str, dict], runs_dir: str, history: Any) -> RunForm:
    """The left column: model, method, sparsity, Run / Cancel, then the collapsible options and protocol."""
    from app.allocation_panel import controls as allocation_controls
    from app.controls import model_controls, protocol_controls

    chosen = "wanda" if "wanda" in methods else next(iter(methods))
    model, model_path = model_controls(gr, default_model)
    method = gr.Dropdown(choices=list(methods), value=chosen, label="Method", elem_id="run-method")
    summary = gr.Markdown(_summary(methods[chosen]))
    pattern = gr.Radio(forms.pattern_labels(chosen), value="unstructured", label="Sparsity pattern",
                       elem_id="run-pattern")
    percent = gr.Slider(0, 95, value=50, step=1, label="Sparsity (%)", elem_id="run-percent")
    nm = gr.Dropdown(list(forms.NM_CHOICES), value="2:4", allow_custom_value=True, visible=False,
                     label="n:m (keep n of every m consecutive weights)", elem_id="run-nm")
    permute = gr.Checkbox(False, label=forms.PERMUTE_LABEL, info="spread the important inputs over the m-groups "
                          "before pruning, stored in the original order", visible=False,
                          interactive=forms.takes_permute(chosen), elem_id="run-permute")
    with gr.Row(elem_id="run-actions"):  # above the options, and sticky (app CSS): never below the fold
        run_button = gr.Button("Run", variant="primary", elem_id="run-button")
        cancel_button = gr.Button("Cancel", variant="stop", elem_id="cancel-button")
    with gr.Row():
        quant = gr.Dropdown(list(forms.QUANT_CHOICES), value="none", label="Quantization (quantizing methods)",
                            elem_id="run-quant")
        group_size = gr.Dropdown(list(forms.GROUP_SIZES), value=128, label="Group size (inputs per scale)",
                                 elem_id="run-group")
    units = forms.units(chosen)
    unit = gr.Dropdown(units, value=units[0] if units else None, visible=bool(units),
                       label="Unit removed (block-scope methods)", elem_id="run-unit")
    with gr.Accordion("Layer allocation (uniform, OWL, custom) and refinement (DSnoT)", open=False,
                      elem_id="run-allocation-options"):
        allocation = allocation_controls(gr, runs_dir=runs_dir, history=history, sparsity=(pattern, percent, nm))
    with gr.Accordion("Method options", open=False):
        groups, option_inputs = _method_controls(gr, methods, chosen)
        extra = gr.Textbox(label="Extra options: key=value per line (override the fields)", lines=2,
                           elem_id="run-extra")
    with gr.Accordion("Calibration, evaluation, device", open=False):
        protocol = protocol_controls(gr, prefix="run")
        eval_dense = gr.Checkbox(True, label="Also the dense perplexity (cached per protocol)")
        save_model = gr.Checkbox(False, label="Save the pruned checkpoint (offered as a download)")
        generate = gr.Checkbox(False, label="Generations: greedy texts of a few fixed prompts, dense and pruned",
                               elem_id="run-generate")
    return RunForm(model, model_path, method, summary, pattern, percent, nm, quant, group_size, unit, groups,
                   option_inputs, extra, protocol, eval_dense, save_model, generate, run_button,
                   cancel_button, allocation, permute)


def _outputs(gr: Any) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The right column: status, the result card, the registry's panels, warnings, details, downloads.

    Each figure sits in its own column with its "How to read this" (and, for a finished run, its
    export button), so a panel the run does not fill hides with its explanation. Returns the
    components by name (panel columns as ``panel:<figure>``, export rows as ``export:<figure>``)
    and, per key of :func:`views.visible`, the names whose visibility it sets.
    """
    from app.figure_download import export_button

    idle = RunView()
    shown = views.visible(idle)
    status = gr.Markdown(views.status_markdown(idle, 0.0), elem_id="run-status")
    card = gr.Markdown(visible=False, elem_id="run-card")  # the answer, first: filled when a run finishes
    parts: dict[str, Any] = {}
    for names in ROWS.values():  # the registry's rows, in order: errors (+ solver panels), allocation, structure
        with gr.Row(equal_height=False):
            for name in names:
                spec = RUN_FIGURES[name]
                with gr.Column(min_width=PANEL_MIN_WIDTH, visible=shown[name]) as parts[f"panel:{name}"]:
                    parts[name] = gr.Plot(views.figure(idle, name), show_label=False, elem_id=f"run-{name}")
                    if spec.explained_by:
                        howto.accordion(gr, "run", Plot(spec.explained_by))
                    if spec.export:
                        with gr.Column(visible=False) as parts[f"export:{name}"]:
                            export_button(gr, parts[name], name)
    warnings = gr.Textbox(label="Warnings", lines=2, max_lines=8, interactive=False, elem_id="run-warnings",
                          visible=False)
    result = gr.Markdown(elem_id="run-result", visible=False)
    generations = gr.HTML(elem_id="run-generations", visible=False)
    files = gr.File(label="Downloads: result JSON, masks, pruned checkpoint", file_count="multiple",
                    interactive=False, elem_id="run-files", visible=False)
    outputs = {"status": status, "card": card, **parts, "warnings": warnings, "result": result,
               "generations": generations, "files": files}
    targets = {key: [f"panel:{key}"] if key in RUN_FIGURES else [key] for key in shown}
    targets["exports"] = [name for name in outputs if name.startswith("export:")]
    return outputs, targets


def with_visibility(update: dict[str, Any], visible: dict[str, bool], shown: dict[str, bool],
                    targets: dict[str, list[str]], gr: Any) -> dict[str, Any]:
    """``update`` with the visibility changes of ``visible`` (against ``shown``, updated in place) as gr.update."""
    for key, show in visible.items():
        if shown.get(key) == show:
            continue
        shown[key] = show
        for name in targets.get(key, [key]):
            update[name] = gr.update(value=update[name], visible=show) if name in update else gr.update(visible=show)
    return update


def build(gr: Any, *, default_model: str, runs_dir: str, history: Any) -> dict[str, Any]:
    """Lay out the Run tab inside the current Blocks and wire Run / Cancel; returns its outputs."""
    methods = forms.method_table()
    with gr.Row():
        with gr.Column(scale=1, min_width=340):
            form = _form(gr, default_model, methods, runs_dir, history)
        with gr.Column(scale=3):
            outputs, shows = _outputs(gr)
    targets = {**outputs, "history": history}

    # gr is the gradio module, passed in (not a type to pyright); Gradio reads this annotation
    def handler(data: dict, request: gr.Request) -> Iterator[dict]:  # pyright: ignore[reportInvalidTypeForm]
        past = list(data[history] or [])
        shown: dict[str, bool] = {}
        for update in run_stream(form.read(data), runs_dir=runs_dir, session=session_of(request)):
            with_visibility(update, update.pop("visible", {}), shown, shows, gr)  # only a change travels
            run_id = update.pop("run_id", None)
            if run_id:
                past.append(run_id)
                update["history"] = past
            yield {targets[key]: value for key, value in update.items()}

    # gr is the gradio module, passed in (not a type to pyright); Gradio reads this annotation
    def cancel(request: gr.Request) -> str:  # pyright: ignore[reportInvalidTypeForm]
        return cancel_message(session_of(request), runs_dir)

    # the status line answers the click at once, in the page, before the server's first update arrives
    form.run_button.click(None, js=f"() => {json.dumps(CLICKED)}", outputs=outputs["status"], queue=False,
                          show_progress="hidden")
    run_event = form.run_button.click(handler, inputs={*form.inputs, history}, outputs=list(targets.values()),
                                      concurrency_limit=16, show_progress="hidden")
    form.cancel_button.click(cancel, inputs=None, outputs=outputs["status"], cancels=[run_event],
                             concurrency_limit=None, show_progress="hidden")
    form.method.change(_on_method(methods, form.groups, gr), inputs=[form.method, form.pattern],
                       outputs=[form.summary, form.pattern, form.percent, form.nm, form.unit, form.permute,
                                *form.groups.values()],
                       queue=False)
    form.pattern.change(lambda p, m: [gr.update(visible=forms.shows_percent(p)), gr.update(visible=forms.shows_nm(p)),
                                      _permute_update(gr, m, p)],
                        inputs=[form.pattern, form.method], outputs=[form.percent, form.nm, form.permute], queue=False)
    return outputs


def session_of(request: Any) -> str:
    """The browser session's id ("local" when called outside a page)."""
    return str(getattr(request, "session_hash", None) or "local")
