"""The Runs tab: the run store as a table; open a past run and replay its plots from events.jsonl.

The table names each run as Compare does (:mod:`toolkit.compare.names`: ``FISTAPruner 50% · OWL ·
DSnoT``, told apart within a model by seed, then start time), with its run id beside it; a pruning
run's time is its prune time, a recovery's its training time, each in its own column.

A replay shows what the live run showed, and nothing of another kind: a pruning run the Run tab's
result card (:mod:`app.card`), its heat-map, layer errors and the panels its method fills (solver,
λ, ranking, kept units, per-layer sparsity, DSnoT's refinement); a recovery run its loss curve,
perplexity before → after, training time and data, and a button to open its parent. Events are
folded at the run store's stamps, so the elapsed time is the live run's. A folder edited by hand
(unreadable JSON, odd values, broken event lines) shows as a row marked ``damaged`` or as warnings
in the replay, never as an exception; a run whose files were deleted gets one line.
"""

import json
import logging
import math
from pathlib import Path
from typing import Any

from app import howto, recover_panel, views
from app.howto import Plot
from toolkit.api import list_runs, open_run
from toolkit.compare import names as run_names
from toolkit.errors import ToolkitError
from toolkit.events import RunStarted
from toolkit.figures.recovery import recovery_figure
from toolkit.live.phase import format_seconds
from toolkit.live.recovery import RecoveryView, fold_recovery
from toolkit.live.view import TERMINAL, RunView, fold, settle, trace_for, traced_linears
from toolkit.store.runs import RunRecord
from toolkit.store.safe_text import code, markdown

log = logging.getLogger(__name__)
RECOVER = "recover"  # a recovery run's method (toolkit.run.recover_config.METHOD; the app never imports torch)
# the run id and the method options (any length) come last, so they never push perplexity off a laptop screen;
# a pruning run's time is its prune time, a recovery's the time it trained (result.json keeps both as prune_seconds)
COLUMNS = ("run", "model", "compression", "achieved", "perplexity", "dense perplexity", "prune s", "training s",
           "status", "run id", "options")


def _number(value: Any, digits: int = 3) -> Any:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return round(number, digits) if math.isfinite(number) else None


def _first(mapping: Any) -> Any:
    return next(iter(mapping.values()), None) if isinstance(mapping, dict) and mapping else None


def row(record: RunRecord, name: str | None = None) -> list[Any]:
    """One table row (:data:`COLUMNS`), the run called ``name`` (default :func:`toolkit.compare.names.run_name`).

    A record whose files hold the wrong types becomes a ``damaged`` row.
    """
    try:
        config, result = dict(record.config), record.result if isinstance(record.result, dict) else {}
        options = config.get("options") or {}
        text = ", ".join(f"{k}={v}" for k, v in options.items()) if isinstance(options, dict) else str(options)
        seconds = _number(result.get("prune_seconds"), 1)
        recovery = config.get("method") == RECOVER
        return [name or run_names.run_name(record), str(config.get("model", "?")), record.label,
                _number(result.get("achieved_sparsity"), 4),
                _number(_first(result.get("ppl"))), _number(_first(result.get("dense_ppl"))),
                None if recovery else seconds, seconds if recovery else None, status_text(record), record.run_id,
                text]
    except (TypeError, ValueError, AttributeError) as exc:
        return [name or record.run_id, "?", "?", None, None, None, None, None, f"damaged: {exc}", record.run_id, ""]


def table_names(records: list[RunRecord]) -> dict[str, str]:
    """Run id → name, as Compare names runs: distinct among the runs of one model (seed, then start time)."""
    by_model: dict[str, list[RunRecord]] = {}
    for record in records:
        config = record.config if isinstance(record.config, dict) else {}
        by_model.setdefault(str(config.get("model", "?")), []).append(record)
    return {record.run_id: name for group in by_model.values()
            for name, record in zip(run_names.run_names(group), group, strict=True)}


def status_text(record: RunRecord) -> str:
    """The status column: the status, or ``damaged: <why>`` for a record whose files are unusable."""
    return f"damaged: {record.error}" if record.status == "damaged" else record.status


def runs_table(runs_dir: str) -> dict[str, Any]:
    """``{"rows", "choices", "message"}`` for the run store under ``runs_dir``."""
    if not Path(runs_dir).is_dir():
        return {"rows": [], "choices": [], "message": f"⚠ the run store `{runs_dir}` does not exist yet (no runs)"}
    records = list_runs(runs_dir)
    damaged = sum(r.status == "damaged" for r in records)
    message = f"{len(records)} runs in `{runs_dir}`"
    if damaged:
        message += f" · ⚠ {damaged} damaged (see the status column)"
    named = table_names(records)
    return {"rows": [row(r, named[r.run_id]) for r in records], "choices": [r.run_id for r in records],
            "message": message}


SECTIONS: dict[str, tuple[str, ...]] = {  # rows of the replay, each shown only when a panel in it is
    "errors": ("heatmap", "layers"), "trace": ("solver", "lambda"), "structure": ("ranking", "kept", "depth"),
    "allocation": ("allocation", "refine"), "recovery": ("loss",)}
PANELS = tuple(name for names in SECTIONS.values() for name in names)
GONE = "its files were deleted"


def _events(record: RunRecord) -> tuple[list[Any], list[float]]:
    """The run's events and their stamps (nan where a line has none)."""
    try:
        stamped = list(record.timed_events())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ToolkitError(f"run {record.run_id}: events.jsonl is unreadable ({exc})") from None
    if not stamped and not (record.path / "events.jsonl").is_file():
        why = GONE if not record.path.is_dir() else "its events.jsonl is missing (deleted?)"
        state = "damaged run" if record.status == "damaged" else "run"
        raise ToolkitError(f"{state} {record.run_id} cannot be replayed: {why}; press Refresh or pick another run")
    return [event for _, event in stamped], [at for at, _ in stamped]


def _last(times: list[float]) -> float:
    """The latest stamp: the clock of a replay that stopped without RunFinished (nan when unstamped)."""
    return max((t for t in times if math.isfinite(t)), default=math.nan)


def pruning_panels(view: RunView) -> dict[str, bool]:
    """Which panels a replayed pruning run shows: those its run filled, none of another kind.

    Every pruning run has its error heat-map and layer errors; the solver panels show for a solver,
    block or Newton trace and the λ panel for FISTAPruner's λ or AWP's projection trace
    (:func:`app.views.visible`); the ranking and kept maps for a structured run; the per-layer
    sparsity for an unstructured or n:m run; DSnoT's before/after once it refined a linear.
    """
    structured = view.structure.ranking is not None or bool(view.structure.kept)
    panels = {"heatmap": True, "layers": True, "ranking": structured, "kept": structured,
              "allocation": view.allocation.applies}
    live = views.visible(view)  # the Run tab's own rule wherever it has one: the replay shows what the live run did
    return {**panels, **{name: bool(show) for name, show in live.items() if name in PANELS}, "loss": False}


def _pruning_replay(record: RunRecord, events: list[Any], times: list[float]) -> dict[str, Any]:
    view = settle(fold(events, times=times), record.status, record.error)
    update, _ = views.render(view, _last(times))
    update["visible"], update["parent"] = pruning_panels(view), ""
    update["traces"] = [f"{layer} · {name}" for layer, name in traced_linears(events)]
    found = howto.run_notes(events)
    update["howto_layers"], update["howto_lambda"] = found[Plot.LAYERS], found[Plot.LAMBDA]
    return update


def _recovery_replay(record: RunRecord, events: list[Any], times: list[float]) -> dict[str, Any]:
    """A recovery run as its live panel drew it: the loss curve, perplexity before → after, its data, its parent."""
    view = fold_recovery(events, times=times)
    if view.status not in TERMINAL and record.status != "running":
        view.status, view.error = ("failed" if record.status == "damaged" else record.status), record.error
    elapsed = view.elapsed(_last(times))
    clock = f"elapsed {format_seconds(elapsed, tenths=True)}" if math.isfinite(elapsed) else \
        "elapsed not recorded (an older run)"
    words = {"finished": "✓", "failed": "✗", "cancelled": "■", "interrupted": "⚠", "running": "▶"}
    fraction = view.step / view.steps if view.steps else 0.0
    status = (f"**{words.get(view.status, '')} {view.status_line()}** · {clock}\n\n"
              f'<progress value="{fraction:.3f}" max="1"></progress>')
    return {"status": status, "loss": recovery_figure(view), "result": recovery_markdown(view, elapsed), "card": "",
            "warnings": "\n".join(view.warnings), "generations": "", "traces": [], "parent": view.parent,
            "visible": {name: name == "loss" for name in PANELS}}


def recovery_markdown(view: RecoveryView, elapsed: float = math.nan) -> str:
    """Perplexity before → after, the loss, the training time, the settings, the training data and the parent."""
    lines = ["| | before | after | change |", "|---|---|---|---|"]
    evaluation = view.protocol.get("evaluation") or {}
    where = f", {evaluation.get('windows', '?')} × {evaluation.get('seqlen', '?')} tokens" if evaluation else ""
    for name, before, after in view.result_rows():
        change = f"{after / before - 1:+.1%}" if math.isfinite(before) and math.isfinite(after) and before else "–"
        lines.append(f"| perplexity ({name}{where}) | {_fmt(before)} | {_fmt(after)} | {change} |")
    if view.losses:
        lines.append(f"| loss (step 1 → {view.step}) | {view.losses[0]:.4f} | {view.losses[-1]:.4f} | |")
    lines.append(f"| training time | | {format_seconds(view.train_seconds, tenths=True)} | |")
    lines.append(f"| elapsed (before, training, saving, after) | | {format_seconds(elapsed, tenths=True)} | |")
    if view.status != "finished":
        how = {"failed": "failed", "running": "is still running"}.get(view.status, f"was {view.status}")
        lines.insert(0, f"No result: the recovery {how}" + (f" ({view.error})." if view.error else ".") + "\n")
    options, data = view.options, view.calibration
    parent = view.protocol.get("parent") or {}
    lines.append(recover_panel.training_line(view.steps, options))
    if data:
        lines.append(f"\nTraining data: {data.get('nsamples')} × {data.get('seqlen')} tokens of {data.get('source')} "
                     f"({data.get('split', 'train')}, seed {data.get('seed')}; the first windows are the parent's "
                     "calibration)")
    kept = "stored keep-masks" if parent.get("masks", "stored") == "stored" else parent.get("masks")
    lines.append(f"\nRun {code(view.run_id)} recovers run {code(view.parent)} ({parent.get('method', '?')} "
                 f"{view.label}, its {kept} kept): **Open the parent run** replays it.")
    return "\n".join(lines)


def _fmt(value: float) -> str:
    return f"{value:.3f}" if math.isfinite(value) else "–"


def _refused(message: str) -> dict[str, Any]:
    """One line and every panel hidden: nothing of an earlier replay stays on the page beside the message."""
    return {"status": f"**⚠ {markdown(message)}**", "visible": dict.fromkeys(PANELS, False), "traces": [], "parent": "",
            "card": "", "result": "", "warnings": "", "generations": ""}


def replay_view(run_id: str, runs_dir: str) -> dict[str, Any]:
    """The Runs-tab outputs of a stored run, replayed from its events: the panels of its kind only.

    Keys: status, the figures in :data:`PANELS` that it shows, ``visible`` (panel → shown), ``card``
    (a finished pruning run's result card, as the Run tab shows it; "" otherwise), warnings, result,
    generations, ``traces`` (its traced linears), ``parent`` (a recovery's parent run, else ""), and
    for a pruning run the run's own notes under the explanations. A run that cannot be
    replayed (its folder or events.jsonl deleted, unreadable) gets one line and no panels.
    """
    if not run_id:
        return {"status": "Pick a run to open."}
    try:
        record = open_run(Path(runs_dir) / str(run_id))
        events, times = _events(record)
        recovery = record.config.get("method") == RECOVER or \
            any(isinstance(e, RunStarted) and e.method == RECOVER for e in events[:1])
        update = (_recovery_replay if recovery else _pruning_replay)(record, events, times)
    except ToolkitError as exc:
        return _refused(str(exc))
    except Exception as exc:  # a hand-edited record we did not foresee: a message, not a traceback
        log.exception("replay failed")
        return _refused(f"run {run_id} could not be replayed ({type(exc).__name__}: {exc})")
    if not events:
        update["status"] = f"Run {code(run_id)} has no events yet (status {record.status})."
    if record.status == "damaged":
        update["status"] = (f"**⚠ damaged: {markdown(record.error)}** · what could be read is shown below.\n\n"
                            f"{update['status']}")
    return update


def trace_view(run_id: str, key: str, runs_dir: str) -> dict[str, Any]:
    """Solver and λ figures of one linear (``"layer · name"``) of a stored run."""
    try:
        layer_text, name = str(key).split(" · ", 1)
        record = open_run(Path(runs_dir) / str(run_id))
        view = trace_for(_events(record)[0], int(layer_text), name)
    except (ToolkitError, ValueError) as exc:
        return {"status": f"**⚠ cannot show that trace: {exc}**"}
    return {"solver": views.figure(view, "solver"), "lambda": views.figure(view, "lambda")}


def _layout(gr: Any) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """The replay's rows (each a hidden column until a replay shows a panel in it): outputs, sections, trace picker."""
    plots: dict[str, Any] = {}
    sections: dict[str, Any] = {}
    notes: dict[Plot, Any] = {}
    explained = {"heatmap": Plot.HEATMAP, "layers": Plot.LAYERS, "solver": Plot.CONVERGENCE, "lambda": Plot.LAMBDA,
                 "ranking": Plot.RANKING, "kept": Plot.KEPT, "depth": Plot.DEPTH, "allocation": Plot.ALLOCATION,
                 "refine": Plot.REFINE,
                 "loss": Plot.RECOVERY}
    trace = None
    for section, names in SECTIONS.items():
        with gr.Column(visible=False, elem_id=f"runs-section-{section}") as sections[section]:
            if section == "trace":
                trace = gr.Dropdown(choices=[], label="Solver trace of linear", elem_id="runs-trace")
            with gr.Row():
                for name in names:
                    plots[name] = gr.Plot(show_label=False, elem_id=f"runs-{name}")
            notes.update(howto.accordions(gr, "runs", *(explained[name] for name in names)))
    outputs = {**plots, "howto_layers": notes[Plot.LAYERS], "howto_lambda": notes[Plot.LAMBDA]}
    return outputs, sections, trace


def build(gr: Any, *, runs_dir: str) -> dict[str, Any]:
    """Lay out the Runs tab inside the current Blocks and wire it."""
    with gr.Row():
        message = gr.Markdown(f"Run store: `{runs_dir}`", elem_id="runs-message")
        refresh = gr.Button("Refresh", scale=0, elem_id="runs-refresh")
    table = gr.Dataframe(headers=list(COLUMNS), value=[], interactive=False, elem_id="runs-table", max_height=320)
    with gr.Row():
        chosen = gr.Dropdown(choices=[], label="Run", scale=3, elem_id="runs-pick")
        open_button = gr.Button("Open and replay", variant="primary", scale=1, elem_id="runs-open")
    status = gr.Markdown(elem_id="runs-status")
    card = gr.Markdown(elem_id="runs-card")  # the answer first, as the Run tab's card, then the details and panels
    result = gr.Markdown(elem_id="runs-result")
    parent = gr.Button("Open the parent run", visible=False, size="sm", elem_id="runs-parent")
    recover_panel.build(gr, runs_dir=runs_dir, chosen=chosen)  # fine-tune the picked run, its masks kept
    outputs, sections, trace = _layout(gr)
    warnings = gr.Textbox(label="Warnings", lines=2, max_lines=8, interactive=False, visible=False,
                          elem_id="runs-warnings")
    generations = gr.HTML(elem_id="runs-generations")
    outputs.update({"status": status, "card": card, "warnings": warnings, "result": result,
                    "generations": generations})
    parent_of = gr.State("")  # the parent of the run this page opened last (a recovery's), for the parent button

    def on_refresh() -> list[Any]:
        found = runs_table(runs_dir)
        return [found["rows"], gr.update(choices=found["choices"]), found["message"]]

    def on_open(run_id: str) -> dict:
        view = replay_view(run_id, runs_dir)
        traces, shown, up = view.pop("traces", None), view.pop("visible", None), view.pop("parent", "")
        update: dict[Any, Any] = {outputs[key]: value for key, value in view.items() if key in outputs}
        if shown is not None:
            for name, show in shown.items():
                update[outputs[name]] = gr.update(value=view.get(name), visible=show)
            for section, names in SECTIONS.items():
                update[sections[section]] = gr.update(visible=any(shown[name] for name in names))
        if "warnings" in view:  # the box shows only when the run has some
            update[warnings] = gr.update(value=view["warnings"], visible=bool(view["warnings"]))
        if traces is not None:
            update[trace] = gr.update(choices=traces, value=traces[-1] if traces else None)
        update[parent_of] = up or ""
        update[parent] = gr.update(visible=bool(up), value=f"Open the parent run {up}" if up else "")
        return update

    def on_parent(up: str) -> list[Any]:
        found = runs_table(runs_dir)
        return [found["rows"], gr.update(choices=found["choices"], value=up or None), found["message"]]

    every = [*outputs.values(), *sections.values(), trace, parent, parent_of]
    refresh.click(on_refresh, outputs=[table, chosen, message])
    open_button.click(on_open, inputs=chosen, outputs=every)
    parent.click(on_parent, inputs=parent_of, outputs=[table, chosen, message]).then(on_open, inputs=chosen,
                                                                                      outputs=every)
    trace.input(on_trace_of(runs_dir, outputs), inputs=[chosen, trace], outputs=[outputs["solver"],
                                                                               outputs["lambda"], status])
    return {"refresh": on_refresh, "open": on_open, "outputs": [table, chosen, message]}


def on_trace_of(runs_dir: str, outputs: dict[str, Any]) -> Any:
    """The trace picker's handler: the solver and λ panels of the picked linear of the picked run."""
    def on_trace(run_id: str, key: str) -> dict:
        if not run_id or not key:
            return {}
        return {outputs[name]: value for name, value in trace_view(run_id, key, runs_dir).items()}
    return on_trace
