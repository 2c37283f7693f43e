"""The Runs tab: the run store as a table; open a past run and replay its plots from events.jsonl.

A folder edited by hand (unreadable JSON, odd values, broken event lines) shows as a row marked
``damaged`` or as warnings in the replay, never as an exception.
"""

import json
import logging
import math
from pathlib import Path
from typing import Any

from app import howto, recover_panel, views
from app.howto import Plot
from toolkit.api import list_runs, open_run
from toolkit.errors import ToolkitError
from toolkit.live.view import fold, settle, trace_for, traced_linears
from toolkit.store.runs import RunRecord

log = logging.getLogger(__name__)
# the method options (any length) come last, so they never push perplexity off a laptop screen
COLUMNS = ("run", "model", "method", "compression", "achieved", "perplexity", "dense perplexity", "prune s", "status",
           "options")


def _number(value: Any, digits: int = 3) -> Any:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return round(number, digits) if math.isfinite(number) else None


def _first(mapping: Any) -> Any:
    return next(iter(mapping.values()), None) if isinstance(mapping, dict) and mapping else None


def row(record: RunRecord) -> list[Any]:
    """One table row; a record whose files hold the wrong types becomes a ``damaged`` row."""
    try:
        config, result = dict(record.config), record.result if isinstance(record.result, dict) else {}
        options = config.get("options") or {}
        text = ", ".join(f"{k}={v}" for k, v in options.items()) if isinstance(options, dict) else str(options)
        return [record.run_id, str(config.get("model", "?")), str(config.get("method", "?")),
                record.label, _number(result.get("achieved_sparsity"), 4),
                _number(_first(result.get("ppl"))), _number(_first(result.get("dense_ppl"))),
                _number(result.get("prune_seconds"), 1), status_text(record), text]
    except (TypeError, ValueError, AttributeError) as exc:
        return [record.run_id, "?", "?", "?", None, None, None, None, f"damaged: {exc}", ""]


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
    return {"rows": [row(r) for r in records], "choices": [r.run_id for r in records], "message": message}


def _events(record: RunRecord) -> list[Any]:
    try:
        return record.events()
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ToolkitError(f"run {record.run_id}: events.jsonl is unreadable ({exc})") from None


def replay_view(run_id: str, runs_dir: str) -> dict[str, Any]:
    """The Run-tab outputs of a stored run, replayed from its events, plus its traced linears."""
    if not run_id:
        return {"status": "Pick a run to open."}
    try:
        record = open_run(Path(runs_dir) / str(run_id))
        events = _events(record)
        view = settle(fold(events), record.status, record.error)
        update, _ = views.render(view, math.nan)
    except ToolkitError as exc:
        return {"status": f"**⚠ {exc}**", "notice": str(exc)}
    except Exception as exc:  # a hand-edited record we did not foresee: a message, not a traceback
        log.exception("replay failed")
        return {"status": f"**⚠ run {run_id} could not be replayed ({type(exc).__name__}: {exc})**", "notice": str(exc)}
    if not events:
        update["status"] = f"Run `{run_id}` has no events yet (status {record.status})."
    if record.status == "damaged":
        update["status"] = f"**⚠ damaged: {record.error}** · what could be read is shown below.\n\n{update['status']}"
        update["notice"] = f"run {run_id} is damaged: {record.error}"
    traces = [f"{layer} · {name}" for layer, name in traced_linears(events)]
    update["traces"] = traces
    found = howto.run_notes(events)
    update["howto_layers"], update["howto_lambda"] = found[Plot.LAYERS], found[Plot.LAMBDA]
    return update


def trace_view(run_id: str, key: str, runs_dir: str) -> dict[str, Any]:
    """Solver and λ figures of one linear (``"layer · name"``) of a stored run."""
    try:
        layer_text, name = str(key).split(" · ", 1)
        record = open_run(Path(runs_dir) / str(run_id))
        view = trace_for(_events(record), int(layer_text), name)
    except (ToolkitError, ValueError) as exc:
        return {"status": f"**⚠ cannot show that trace: {exc}**"}
    return {"solver": views.figure(view, "solver"), "lambda": views.figure(view, "lambda")}


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
    recover_panel.build(gr, runs_dir=runs_dir, chosen=chosen)  # fine-tune the picked run, its masks kept
    with gr.Row():
        heatmap = gr.Plot(show_label=False, elem_id="runs-heatmap")
        layers = gr.Plot(show_label=False)
    notes = howto.accordions(gr, "runs", Plot.HEATMAP, Plot.LAYERS)
    trace = gr.Dropdown(choices=[], label="Solver trace of linear", elem_id="runs-trace")
    with gr.Row():
        solver = gr.Plot(show_label=False)
        lam = gr.Plot(show_label=False)
    notes.update(howto.accordions(gr, "runs", Plot.CONVERGENCE, Plot.LAMBDA))
    with gr.Row():
        ranking = gr.Plot(show_label=False, elem_id="runs-ranking")
        kept = gr.Plot(show_label=False, elem_id="runs-kept")
    howto.accordions(gr, "runs", Plot.RANKING, Plot.KEPT)
    with gr.Row():  # each layer's sparsity (uniform, OWL, a ratio file) and DSnoT's refinement
        allocation = gr.Plot(show_label=False, elem_id="runs-allocation")
        refine = gr.Plot(show_label=False, elem_id="runs-refine")
    howto.accordions(gr, "runs", Plot.ALLOCATION, Plot.REFINE)
    warnings = gr.Textbox(label="Warnings", lines=2, max_lines=8, interactive=False)
    result = gr.Markdown()
    generations = gr.HTML(elem_id="runs-generations")
    outputs = {"status": status, "heatmap": heatmap, "layers": layers, "solver": solver, "lambda": lam,
               "ranking": ranking, "kept": kept, "allocation": allocation, "refine": refine, "warnings": warnings,
               "result": result, "generations": generations,
               "howto_layers": notes[Plot.LAYERS], "howto_lambda": notes[Plot.LAMBDA]}

    def on_refresh() -> list[Any]:
        found = runs_table(runs_dir)
        return [found["rows"], gr.update(choices=found["choices"]), found["message"]]

    def on_open(run_id: str) -> dict:
        view = replay_view(run_id, runs_dir)
        notice = view.pop("notice", None)
        if notice:
            gr.Warning(notice)
        traces = view.pop("traces", None)
        update = {outputs[key]: value for key, value in view.items()}
        if traces is not None:
            update[trace] = gr.update(choices=traces, value=traces[-1] if traces else None)
        return update

    def on_trace(run_id: str, key: str) -> dict:
        if not run_id or not key:
            return {}
        return {outputs[name]: value for name, value in trace_view(run_id, key, runs_dir).items()}

    refresh.click(on_refresh, outputs=[table, chosen, message])
    open_button.click(on_open, inputs=chosen, outputs=[*outputs.values(), trace])
    trace.input(on_trace, inputs=[chosen, trace], outputs=[solver, lam, status])
    return {"refresh": on_refresh, "outputs": [table, chosen, message]}
