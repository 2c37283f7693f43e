"""The Lesson tab: one click runs (or reuses) magnitude, Wanda, SparseGPT and FISTAPruner at 50%, side by side.

:func:`lesson_stream` is the handler as a plain generator of ``{output name: value}`` updates (the
tests drive it directly): first the plan (which runs are reused, how long the others take), then
its place in the device queue while a Run, a Sweep or another Lesson prunes on the device (the
queue of :mod:`app.jobs`, one pruning at a time), then progress while the missing runs run, then
the figures, the generated sentences and the walkthrough.
"""

from __future__ import annotations

import html
import time
from collections.abc import Generator, Iterator
from typing import Any

from app import howto
from app.howto import Plot
from app.jobs import device_queue
from toolkit.api import CancelToken, open_run
from toolkit.errors import ToolkitError
from toolkit.events import LayerDone, RunFailed, RunStarted
from toolkit.figures import masks as viz_masks
from toolkit.live.phase import format_seconds
from toolkit.sweep import SweepPoint
from toolkit.teach import figures as viz_lesson
from toolkit.teach import lesson
from toolkit.teach.lesson_view import LessonMaterial, lesson_material, walkthrough

FIGURES = ("heatmaps", "layers", "masks", "ppl")
QUEUE_POLL = 0.5  # seconds between two looks at the device queue while the lesson waits its turn
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
    return (f"<p>Greedy continuation of <i>{html.escape(first.prompt)}</i> (32 new tokens):</p>"
            f"<table id='lesson-generation-table'>{cells}</table>")


def material_update(material: LessonMaterial) -> dict[str, Any]:
    """The figures, the texts and the walkthrough of the four runs."""
    mask_title = f"keep-masks of layer {material.layer} {material.linear} (dark = kept)"
    return {"heatmaps": viz_lesson.heatmaps_figure(material.methods),
            "layers": viz_lesson.layer_errors_figure(material.methods),
            "masks": viz_masks.mask_images_figure(material.masks, title=mask_title),
            "ppl": viz_lesson.perplexity_bars(material.methods),
            "generations": generations_html(material), "walkthrough": walkthrough(material)}


def _progress(event: Any, state: dict[str, Any], plan: lesson.LessonPlan, start: float) -> str | None:
    """The status line for a run's event (None when it changes nothing worth showing)."""
    if isinstance(event, RunStarted):
        state.update(method=event.method, layers=event.num_layers, done=0, index=state.get("index", 0) + 1)
    elif isinstance(event, LayerDone):
        state["done"] = event.layer + 1
    elif isinstance(event, RunFailed):
        return f"**⚠ {state.get('method', 'a run')} failed:** {event.error}"
    else:
        return None
    left = max(0.0, plan.total_seconds - (time.monotonic() - start))
    name = lesson.LABELS.get(state["method"], state["method"])
    return (f"Running {name} ({state['index']} of {len(plan.to_run)} to run): layer {state['done']} of "
            f"{state['layers']} · about {format_seconds(left)} left in all")


def lesson_stream(model: str, runs_dir: str, cancel: CancelToken | None = None) -> Iterator[dict[str, Any]]:
    """Plan, wait for the device, run what is missing, then draw; yields updates keyed by output name.

    The missing runs wait in the device's queue (``status`` shows the place in line); cancelling,
    or closing the generator, while queued leaves the queue and runs nothing.
    """
    try:
        plan = lesson.plan_lesson(model, runs_dir, lesson.METHODS)
    except ToolkitError as exc:
        yield {"status": f"**⚠ error:** {exc}"}
        return
    start = time.monotonic()
    yield {"plan": lesson.plan_text(plan), "status": "Reading the stored runs…" if not plan.to_run else
           "Starting the first run…"}
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
    seconds = time.monotonic() - start
    note = f"; did not finish: {why}" if why else ""
    yield {**update,
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
    """Run the plan's missing runs (the device is held), yielding progress; returns :data:`CANCELLED` or ""."""
    start, state = time.monotonic(), {}
    for item in lesson.run_lesson(plan, cancel):
        if isinstance(item, SweepPoint):
            if item.status == "finished" and item.run_id:
                stored[item.method] = open_run(f"{runs_dir}/{item.run_id}")
            elif item.status == "cancelled":
                return CANCELLED
            else:
                failed[lesson.LABELS.get(item.method, item.method)] = item.error
            continue
        line = _progress(item, state, plan, start)
        if line:
            yield {"status": line}
    return ""


def build(gr: Any, *, default_model: str, runs_dir: str) -> dict[str, Any]:
    """Lay out the Lesson tab inside the current Blocks and wire its button; returns the plan refresher."""
    plan = gr.Markdown(elem_id="lesson-plan")
    with gr.Row():
        start = gr.Button("Run the lesson", variant="primary", elem_id="lesson-button", scale=0)
        stop = gr.Button("Cancel", variant="stop", elem_id="lesson-cancel", scale=0)
    status = gr.Markdown("Press **Run the lesson**: the runs already in the store are reused.", elem_id="lesson-status")
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
    outputs = {"plan": plan, "status": status, "heatmaps": heatmaps, "layers": layers, "ppl": ppl, "masks": masks,
               "generations": generations, "walkthrough": story}

    def handler() -> Iterator[dict]:
        token = CancelToken()
        try:
            for update in lesson_stream(default_model, runs_dir, token):
                yield {outputs[key]: value for key, value in update.items()}
        finally:
            token.cancel()  # the page went away or Cancel was pressed: stop a run in progress

    def refresh() -> str:
        return plan_markdown(default_model, runs_dir)

    event = start.click(handler, outputs=list(outputs.values()), concurrency_limit=1, show_progress="hidden")
    stop.click(None, cancels=[event])
    return {"refresh": refresh, "plan": plan}
