"""The Lesson tab: one click runs (or reuses) magnitude, Wanda, SparseGPT and FISTAPruner at 50%, side by side.

:func:`lesson_stream` is the handler as a plain generator of ``{output name: value}`` updates (the
tests drive it directly): first the plan (which runs are reused, how long the others take), then
its place in the device queue while a Run, a Sweep or another Lesson prunes on the device (the
queue of :mod:`app.jobs`, one pruning at a time), then the runs drawn as they go (:class:`LiveLesson`:
each method's heat-map, layer error and perplexity fill in as its layers finish, the stage under way,
a progress bar over the whole lesson and the time left, measured on this machine as it runs), then
the keep-masks, the generated sentences and the walkthrough.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Generator, Iterator
from typing import Any

from app import forms, howto
from app.howto import Plot
from app.jobs import DONE, Job, device_queue
from toolkit.api import CancelToken, open_run
from toolkit.errors import ToolkitError
from toolkit.events import EvalPoint, Generated, LayerDone, RunFinished, RunStarted, SublayerPruned
from toolkit.figures import masks as viz_masks
from toolkit.live.phase import format_seconds
from toolkit.live.view import RunView
from toolkit.models.embedded import EMBEDDED_MODELS
from toolkit.teach import figures as viz_lesson
from toolkit.teach import lesson
from toolkit.teach.lesson_view import (
    LessonMaterial,
    MethodMaterial,
    lesson_material,
    live_material,
    method_material,
    walkthrough,
)

FIGURES = ("heatmaps", "layers", "masks", "ppl")
QUEUE_POLL = 0.5  # seconds between two looks at the device queue while the lesson waits its turn
REFRESH = 1.0  # seconds between two status lines while a run is silent (the estimate counts down)
TELL = 0.5  # at most two status lines a second within one stage
REDRAW = 2.0  # at most one redraw of the live figures every this many seconds (plotly figures are heavy)
CANCELLED = "**■ lesson cancelled**; finished runs stay in the store and are reused next time."


def plan_markdown(model: str, runs_dir: str) -> str:
    """The plan as shown before anything runs (or the error line when the model cannot be used)."""
    try:
        return lesson.plan_text(lesson.plan_lesson(model, runs_dir, lesson.METHODS))
    except ToolkitError as exc:
        return f"**⚠ error:** {exc}"


def generations_html(material: LessonMaterial) -> str:
    """A table of the first prompt's greedy continuation by the dense model and by each pruned one."""
    with_text = [m for m in material.methods if m.prompt]
    if not with_text:
        return "<p><em>No generations stored with these runs (they were made without generations).</em></p>"
    first = with_text[0]
    rows = [("dense", first.dense_text)] + [(m.label, m.text if m.text is not None else "(not stored)")
                                            for m in material.methods]
    cells = "".join(f"<tr><th style='text-align:left;padding-right:1em'>{html.escape(name)}</th>"
                    f"<td>{html.escape(first.prompt)}<b>{html.escape(text)}</b></td></tr>" for name, text in rows)
    return (f"<p>Greedy continuation of <i>{html.escape(first.prompt)}</i> "
            f"(the class preset's {lesson.GENERATE_TOKENS} new tokens):</p>"
            f"<table id='lesson-generation-table'>{cells}</table>")


def material_update(material: LessonMaterial) -> dict[str, Any]:
    """The figures, the texts and the walkthrough of the four runs."""
    mask_title = f"keep-masks of layer {material.layer} {material.linear} (dark = kept)"
    return {"heatmaps": viz_lesson.heatmaps_figure(material.methods),
            "layers": viz_lesson.layer_errors_figure(material.methods),
            "masks": viz_masks.mask_images_figure(material.masks, title=mask_title),
            "ppl": viz_lesson.perplexity_bars(material.methods),
            "generations": generations_html(material), "walkthrough": walkthrough(material)}


def progress_html(fraction: float, text: str = "") -> str:
    """The lesson's progress bar over all its runs (``fraction`` in [0, 1]) with a short caption."""
    percent = max(0.0, min(1.0, fraction)) * 100
    return (f"<div id='lesson-bar' title='{percent:.0f}%' style='background:#e5e7eb;border-radius:4px;height:12px;"
            f"width:100%'><div style='background:#4c78a8;border-radius:4px;height:12px;width:{percent:.1f}%'></div>"
            f"</div><div style='font-size:0.85em;color:#555'>{html.escape(text)}</div>")


class LiveLesson:
    """What the page draws while the lesson runs: one RunView per method run, the clock, the reused runs.

    The figures are those of the finished lesson (:mod:`toolkit.teach.figures`), fed with the live
    views: a heat-map cell appears as its linear is pruned, a layer-error point as its layer ends,
    a perplexity bar as its run measures it.
    """

    def __init__(self, plan: lesson.LessonPlan, now: float) -> None:
        self.plan, self.started = plan, now
        self.clock = plan.clock(now)
        self.views: dict[str, RunView] = {}
        self.reused = {m: method_material(r) for m, r in plan.stored.items() if r is not None}
        self.drawn_at, self.changed = -math.inf, True
        self.told_at, self.told = -math.inf, ""

    def apply(self, event: Any, now: float) -> None:
        """Fold one event of the run under way (the clock's current method)."""
        method = self.clock.runs[self.clock.index].method if self.clock.index < len(self.clock.runs) else ""
        if isinstance(event, RunStarted):
            method = event.method
        if method:
            self.views.setdefault(method, RunView()).apply(event, now)
            self.changed = self.changed or isinstance(event, RunStarted | SublayerPruned | LayerDone | EvalPoint |
                                                      Generated | RunFinished)
        self.clock.apply(event, now)

    def materials(self) -> list[MethodMaterial]:
        """Every method's material in the lesson's order: stored, live, or an empty grid still to fill."""
        found = [*self.reused.values(), *(live_material(v, m) for m, v in self.views.items())]
        rows = max((m.num_layers for m in found), default=0)
        linears = next((m.linears for m in found if m.linears), [])
        out = []
        for config in self.plan.configs:
            method = config.method
            if method in self.reused:
                out.append(self.reused[method])
            elif method in self.views:
                out.append(live_material(self.views[method], method))
            else:
                out.append(MethodMaterial(method=method, run_id="", num_layers=rows, linears=list(linears)))
        return out

    def figures(self, now: float) -> dict[str, Any]:
        """The live figures and texts (the masks and the walkthrough wait for the stored runs)."""
        self.drawn_at, self.changed = now, False
        methods = self.materials()
        material = LessonMaterial(methods=methods)
        return {"heatmaps": viz_lesson.heatmaps_figure(methods, waiting="loading the model: the heat-maps draw "
                                                                         "as the layers are pruned"),
                "layers": viz_lesson.layer_errors_figure(methods), "ppl": viz_lesson.perplexity_bars(methods),
                "generations": generations_html(material)}

    def status_due(self, now: float) -> bool:
        """Whether the stage changed or the status line is :data:`TELL` seconds old (events can come by the hundred)."""
        return now - self.told_at >= TELL or self.clock.stage_line(lesson.LABELS) != self.told

    def due(self, now: float) -> bool:
        """Whether the figures changed and the last redraw is :data:`REDRAW` seconds old."""
        return self.changed and now - self.drawn_at >= REDRAW

    def status(self, now: float) -> dict[str, Any]:
        """The status line (stage, elapsed, about how long is left) and the progress bar."""
        self.told_at, self.told = now, self.clock.stage_line(lesson.LABELS)
        left = self.clock.seconds_left(now)
        stage = self.told or "every run ended: reading them back and drawing the lesson"
        line = (f"**▶ {stage}** · {format_seconds(now - self.started)} elapsed · "
                f"about **{format_seconds(left)}** left")
        return {"status": line, "progress": progress_html(self.clock.fraction(now), f"{self.clock.index} of "
                                                          f"{len(self.clock.runs)} runs done")}


def lesson_stream(model: str, runs_dir: str,
                  cancel: CancelToken | None = None) -> Generator[dict[str, Any], None, None]:
    """Plan, wait for the device, run what is missing while drawing it, then the whole lesson.

    Yields updates keyed by output name. The missing runs wait in the device's queue (``status``
    shows the place in line); cancelling, or closing the generator, while queued leaves the queue
    and runs nothing.
    """
    try:
        plan = lesson.plan_lesson(model, runs_dir, lesson.METHODS)
    except ToolkitError as exc:
        yield {"status": f"**⚠ error:** {exc}"}
        return
    start = lesson.wall_clock()
    yield {"plan": lesson.plan_text(plan), **LiveLesson(plan, start).figures(start),
           "status": "Reading the stored runs…" if not plan.to_run else "Starting the first run…",
           "progress": progress_html(0.0)}
    stored, failed = dict(plan.stored), {}
    if plan.to_run:
        ended = yield from _queued_runs(plan, runs_dir, cancel or CancelToken(), stored, failed)
        if ended:
            yield {"status": ended}
            return
    records = {m: r for m, r in stored.items() if r is not None}
    why = "; ".join(f"{name}: {error}" for name, error in failed.items())
    if not records:
        yield {"status": f"**⚠ error:** no lesson run finished ({why})"}
        return
    try:  # reading the runs back and comparing their masks can refuse them (e.g. masks of other shapes)
        update = material_update(lesson_material(records))
    except ToolkitError as exc:
        yield {"status": f"**⚠ error:** {exc}"}
        return
    seconds = lesson.wall_clock() - start
    note = f"; did not finish: {why}" if why else ""
    yield {**update, "progress": progress_html(1.0, f"{len(records)} runs"),
           "status": f"**✓ lesson ready** in {format_seconds(seconds, tenths=True)} ({len(records)} runs{note})."}


def queued_line(ahead: int, device: str) -> str:
    """The status line while the lesson waits for the device."""
    return (f"**… queued** · position {ahead} in line for device `{device}` ({ahead} "
            f"job{'s' if ahead != 1 else ''} ahead of the lesson; one pruning at a time); the lesson's runs "
            "start when the device is free.")


def _queued_runs(plan: lesson.LessonPlan, runs_dir: str, cancel: CancelToken, stored: dict[str, Any],
                 failed: dict[str, str]) -> Generator[dict[str, Any], None, str]:
    """Wait for the device, then run the missing runs into ``stored`` / ``failed``.

    Returns a closing status line when the lesson ended early (cancelled), else "". The device is
    given back (or the queue left) however it ends, a closed generator included.
    """
    device = plan.to_run[0].device
    line = device_queue(device)
    ticket = line.join()
    try:
        waited = False
        while not line.try_start(ticket):
            if cancel.cancelled:
                return "**■ lesson cancelled** while waiting in the queue; nothing was run."
            waited = True
            yield {"status": queued_line(line.position(ticket), device)}
            time.sleep(QUEUE_POLL)
        if waited:  # runs another job made while the lesson waited are reused
            plan = lesson.plan_lesson(plan.configs[0].model, runs_dir, [c.method for c in plan.configs])
            stored.update(plan.stored)
            yield {"plan": lesson.plan_text(plan), "status": "Device free: starting the first run…"}
        return (yield from _run_missing(plan, runs_dir, cancel, stored, failed))
    finally:
        line.leave(ticket)


def _run_missing(plan: lesson.LessonPlan, runs_dir: str, cancel: CancelToken, stored: dict[str, Any],
                 failed: dict[str, str]) -> Generator[dict[str, Any], None, str]:
    """Run the plan's missing runs (the device is held), drawing them; returns :data:`CANCELLED` or "".

    The runs go on in a worker thread (:class:`app.jobs.Job`), so the status line and its estimate
    refresh every :data:`REFRESH` seconds even while a solve is silent.
    """
    live = LiveLesson(plan, lesson.wall_clock())
    job = Job(token=cancel)
    job.start(lambda: lesson.run_lesson(plan, cancel))
    try:
        while (item := job.get(REFRESH)) is not DONE:
            now = lesson.wall_clock()
            if isinstance(item, lesson.LessonPoint):
                live.clock.ended(item.method, now)
                if item.status == "cancelled":
                    return CANCELLED
                if item.status == "finished" and item.run_id:
                    stored[item.method] = open_run(f"{runs_dir}/{item.run_id}")
                else:
                    failed[lesson.LABELS.get(item.method, item.method)] = item.error
            elif isinstance(item, tuple):  # ("error", message) from the worker
                failed["lesson"] = str(item[1])
            elif item is not None:
                live.apply(item, now)
            if live.due(now):
                yield {**live.status(now), **live.figures(now)}
            elif live.status_due(now):
                yield live.status(now)
    finally:
        if not job.finished.is_set():
            cancel.cancel()  # the page went away or Cancel was pressed: stop the run under way
            job.finished.wait()
    return ""


def build(gr: Any, *, default_model: str, runs_dir: str) -> dict[str, Any]:
    """Lay out the Lesson tab inside the current Blocks and wire its button; returns the plan refresher.

    The model is one of the embedded ones (the app's ``--model`` first when it is another): the
    Lesson is planned, run and drawn on the one picked.
    """
    choices = list(dict.fromkeys([default_model, *forms.MODELS[:len(EMBEDDED_MODELS)]]))
    with gr.Row():
        model = gr.Dropdown(choices=choices, value=default_model, label="Model", info=forms.EMBEDDED_NOTE,
                            elem_id="lesson-model", scale=0, min_width=420)
    plan = gr.Markdown(elem_id="lesson-plan")
    with gr.Row():
        start = gr.Button("Run the lesson", variant="primary", elem_id="lesson-button", scale=0)
        stop = gr.Button("Cancel", variant="stop", elem_id="lesson-cancel", scale=0)
    status = gr.Markdown("Press **Run the lesson**: the runs already in the store are reused.", elem_id="lesson-status")
    progress = gr.HTML(elem_id="lesson-progress")
    heatmaps = gr.Plot(show_label=False, elem_id="lesson-heatmaps")
    howto.accordions(gr, "lesson", Plot.HEATMAP)
    with gr.Row():
        layers = gr.Plot(show_label=False, elem_id="lesson-layers")
        ppl = gr.Plot(show_label=False, elem_id="lesson-ppl")
    howto.accordions(gr, "lesson", Plot.LAYERS, Plot.PERPLEXITY)
    masks = gr.Plot(show_label=False, elem_id="lesson-masks")
    howto.accordions(gr, "lesson", Plot.MASKS)
    generations = gr.HTML(elem_id="lesson-generations")
    story = gr.Markdown(elem_id="lesson-walkthrough")
    outputs = {"plan": plan, "status": status, "progress": progress, "heatmaps": heatmaps, "layers": layers,
               "ppl": ppl, "masks": masks,
               "generations": generations, "walkthrough": story}

    def handler(name: str) -> Iterator[dict]:
        token = CancelToken()
        try:
            for update in lesson_stream(name or default_model, runs_dir, token):
                yield {outputs[key]: value for key, value in update.items()}
        finally:
            token.cancel()  # the page went away or Cancel was pressed: stop a run in progress

    def refresh(name: str | None = None) -> str:
        return plan_markdown(name or default_model, runs_dir)

    event = start.click(handler, inputs=model, outputs=list(outputs.values()), concurrency_limit=1,
                        show_progress="hidden")
    stop.click(None, cancels=[event])
    model.change(refresh, inputs=model, outputs=plan, queue=False)
    return {"refresh": refresh, "plan": plan, "model": model}
