"""The Runs tab's Recover panel: fine-tune the picked run with its masks kept (LoRA or full), the loss curve live.

:func:`recover_stream` is the handler's logic as a plain generator of ``{output name: value}``
dicts (the tests drive it directly). It checks the input, waits for the device (one job at a time
per device, shared with the Run tab), follows :func:`toolkit.api.recover_model` in a
:class:`~app.jobs.Job` and yields a refresh at most every :data:`PERIOD` seconds. The refresh holds
the status, the loss figure when a step arrived, and the before/after table at the end.
:func:`build` lays the panel out under the run picker and wires Recover / Cancel.
"""

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from app import howto
from app.card import bought_sentence
from app.howto import Plot
from app.jobs import DONE, SESSIONS, Job, cancel_and_wait, device_queue
from app.page_words import page_words
from toolkit.api import CancelToken, recover_model
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import Event
from toolkit.figures.recovery import recovery_figure
from toolkit.live.recovery import RecoveryView
from toolkit.run.recover_config import DEFAULT_STEPS

log = logging.getLogger(__name__)
PERIOD = 0.5  # seconds between refreshes while a recovery streams
QUEUE_POLL = 0.5
KIND = "recover"  # the session's job kind (apart from the Run tab's "run")


TRAINS = ("lora", "full")  # the panel's choice: masked-LoRA adapters, or the linears themselves (recover --train)


def _events(run_dir: Path, steps: int, token: CancelToken, train: str = "lora") -> Iterator[Any]:
    """The recovery's events, live: :func:`recover_model` runs in a thread; closing this cancels it."""
    items: queue.Queue = queue.Queue()
    end = object()
    failure: list[BaseException] = []

    def worker() -> None:
        try:
            recover_model(run=run_dir, steps=steps, train=train, on_event=items.put, cancel=token)
        except RunCancelled:
            pass  # its RunFailed event already says so
        except Exception as exc:  # handed to the consumer: the Job turns it into a message
            failure.append(exc)
        finally:
            items.put(end)

    thread = threading.Thread(target=worker, name="prunelab-recover", daemon=True)
    thread.start()
    try:
        while (item := items.get()) is not end:
            yield item
    finally:
        if thread.is_alive():
            token.cancel()
            thread.join()
    if failure:
        raise failure[0]


def recover_stream(run_id: str, steps: Any, *, runs_dir: str, session: str = "local", train: str = "lora",
                   clock: Callable[[], float] = time.monotonic) -> Iterator[dict[str, Any]]:
    """Check, queue, run and follow one recovery of run ``run_id``; yields ``{output name: value}`` updates.

    ``train`` is ``lora`` (masked-LoRA adapters, merged) or ``full`` (the linears trained directly).

    Every failure is one message in ``status`` (no toast besides), never an exception. Closing the
    generator (the page's Cancel, a closed tab) cancels the recovery or leaves the queue.
    """
    try:
        count = _steps(steps)
        if not run_id:
            raise ToolkitError("pick a run first (a finished run with a saved model)")
        if train not in TRAINS:
            raise ToolkitError(f"unknown training {train!r}: pick lora or full")
    except ToolkitError as exc:
        yield {"status": _refused(str(exc))}
        return
    job = SESSIONS.begin(session, KIND)
    line = device_queue("auto")
    ticket = line.join()
    try:
        while not job.token.cancelled and not line.try_start(ticket):
            yield {"status": f"**… queued** · position {line.position(ticket)} in line for the device"}
            time.sleep(QUEUE_POLL)
        if job.token.cancelled:
            yield {"status": "**■ cancelled** while waiting in the queue; nothing was run."}
            return
        job.start(lambda: _events(Path(runs_dir) / str(run_id), count, job.token, train),
                  on_exit=lambda: line.leave(ticket))
        yield from _follow(job, clock, run_id)
    finally:
        job.stream_closed(line, ticket)


def _steps(value: Any) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ToolkitError(f"steps must be a whole number ≥ 1, got {value!r}") from None
    if not math.isfinite(number) or number != int(number) or number < 1:
        raise ToolkitError(f"steps must be a whole number ≥ 1, got {value!r}")
    return int(number)


def _follow(job: Job, clock: Callable[[], float], run_id: str) -> Iterator[dict[str, Any]]:
    """Fold the job's events into a RecoveryView; yield throttled refreshes, then the final state."""
    view, error, drawn = RecoveryView(), "", -1
    yield {"status": f"**▶ starting** · loading run `{run_id}`'s saved model…", "loss": recovery_figure(view),
           "result": ""}
    next_tick = clock() + PERIOD
    while (item := job.get(next_tick - clock())) is not DONE:
        if isinstance(item, tuple) and item and item[0] == "error":
            error = item[1]
        elif item is not None:
            view.apply(cast(Event, item))
            job.run_id = view.run_id or job.run_id
        if clock() < next_tick:
            continue
        update: dict[str, Any] = {"status": status_markdown(view)}
        if len(view.losses) != drawn:
            update["loss"], drawn = recovery_figure(view), len(view.losses)
        yield update
        next_tick = clock() + PERIOD
    final = {"status": status_markdown(view), "loss": recovery_figure(view), "result": result_markdown(view)}
    if view.status == "idle":  # refused before it started
        final["status"] = _refused(error or "the recovery ended before it started")
    return (yield final)


def _refused(message: str) -> str:
    return f"**⚠ {page_words(message)}**"


STARTING = "**▶ starting** · loading the run's saved model and evaluating it before the fine-tune…"


def status_markdown(view: RecoveryView) -> str:
    """The status line: a bar over the steps and the view's one-line status (the start line until the run starts)."""
    if view.status == "idle":  # started, its first event not yet here: the picker's hint is no status
        return STARTING
    words = {"running": "▶", "finished": "✓", "failed": "✗", "cancelled": "■"}
    fraction = view.step / view.steps if view.steps else 0.0
    line = view.status_line() if view.status not in ("failed", "cancelled") else page_words(view.status_line())
    return f"**{words.get(view.status, '')} {line}**\n\n" + f'<progress value="{fraction:.3f}" max="1"></progress>'


def result_markdown(view: RecoveryView) -> str:
    """Perplexity before and after, the loss's first and last steps, the new run and its parent."""
    if view.status != "finished":
        return ""
    lines = ["| | before | after | change |", "|---|---|---|---|"]
    for name, before, after in view.result_rows():
        change = f"{after / before - 1:+.1%}" if math.isfinite(before) and math.isfinite(after) and before else "–"
        lines.append(f"| perplexity ({name}) | {before:.3f} | {after:.3f} | {change} |")
    if view.losses:
        lines.append(f"| loss (step 1 → {view.step}) | {view.losses[0]:.4f} | {view.losses[-1]:.4f} | |")
    masks = "the masks kept" if not view.warnings else "the masks applied: see the warnings below"
    lines.append(f"\nRecovered run `{view.run_id}` (parent `{view.parent}`, {view.label}, {masks}) · "
                 f"training {view.train_seconds:.1f} s · it is listed above after Refresh.")
    if view.bought is not None:  # as the Run tab's result card says it (app/card.py)
        lines.append(f"\n{bought_sentence(view)}")
    lines += [f"\n⚠ {page_words(warning)}" for warning in view.warnings]  # e.g. keep-masks that keep zeros
    return "\n".join(lines)


def training_line(steps: int, options: dict[str, Any]) -> str:
    """The replay's line on what trained: masked LoRA (rank, α) or the full fine-tune, steps, batch, lr, weights."""
    full = options.get("train") == "full"
    how = "Full fine-tune (the linears themselves, masks kept)" if full else "Masked LoRA"
    if not isinstance(options.get("trainable"), int):
        return f"\n{how}: {steps} steps"
    batch = options.get("batch_size", "?")
    lora = "" if full else f"rank {options.get('rank', '?')}, α {options.get('alpha', '?')}, "
    return (f"\n{how}: {steps} steps of {batch} window{'' if batch == 1 else 's'}, {lora}lr {options.get('lr', '?')}, "
            f"{options['trainable']:,} trainable weights")


def cancel_message(session: str, runs_dir: str, wait: float = 20.0) -> str:
    """Cancel the session's recovery (or its place in the queue); say how it ended."""
    ended = cancel_and_wait(session, KIND, runs_dir, wait)
    if ended is None:
        return "Nothing to cancel: no recovery is going on."
    job, status = ended
    if not status:
        return "**■ cancelled** before it started; nothing was written."
    return f"**■ cancelled** · run `{job.run_id}` is marked **{status}**; its parent run is unchanged."


def build(gr: Any, *, runs_dir: str, chosen: Any) -> dict[str, Any]:
    """Lay out the Recover panel (steps, Recover, Cancel, status, live loss curve, result) and wire it."""
    with gr.Accordion("Recover: fine-tune the picked run with its masks kept (masked LoRA or full)", open=False):
        with gr.Row():
            steps = gr.Number(value=DEFAULT_STEPS, precision=0, minimum=1, label="Steps", scale=1,
                              elem_id="recover-steps")
            train = gr.Radio(list(TRAINS), value="lora", label="Train", scale=1, elem_id="recover-train",
                             info="lora: low-rank adapters, merged; full: the linear weights themselves")
            start = gr.Button("Recover", variant="primary", scale=1, elem_id="recover-button")
            stop = gr.Button("Cancel recovery", variant="stop", scale=1, elem_id="recover-cancel")
        status = gr.Markdown(elem_id="recover-status")
        loss = gr.Plot(recovery_figure(RecoveryView()), show_label=False, elem_id="recover-loss")
        howto.accordions(gr, "recover", Plot.RECOVERY)
        result = gr.Markdown(elem_id="recover-result")
    outputs = {"status": status, "loss": loss, "result": result}

    # gr is the gradio module, passed in (not a type to pyright); Gradio reads this annotation
    def handler(run_id: str, count: Any, kind: str,
                request: gr.Request) -> Iterator[dict]:  # pyright: ignore[reportInvalidTypeForm]
        session = str(getattr(request, "session_hash", None) or "local")
        for update in recover_stream(run_id, count, runs_dir=runs_dir, session=session, train=kind):
            yield {outputs[key]: value for key, value in update.items()}

    # gr is the gradio module, passed in (not a type to pyright); Gradio reads this annotation
    def cancel(request: gr.Request) -> str:  # pyright: ignore[reportInvalidTypeForm]
        return cancel_message(str(getattr(request, "session_hash", None) or "local"), runs_dir)

    event = start.click(handler, inputs=[chosen, steps, train], outputs=list(outputs.values()), concurrency_limit=16,
                        show_progress="hidden")
    stop.click(cancel, inputs=None, outputs=status, cancels=[event], concurrency_limit=None, show_progress="hidden")
    return outputs
