"""The Run form's "Layer allocation and refinement" inputs (Gradio layout and wiring; the logic is app.allocation_form).

Allocation: uniform, OWL (M and λ) or a custom per-layer ratios table. The table is filled from a
stored run (the run just finished in this tab by default): its OWL ratios, or its target in every
layer; "uniform at the slider" resets every row to the sparsity slider. The line under it shows the
total and whether it meets the sparsity; **Export** writes the ratio file the CLI takes (the run uses
the same file). Refinement: none or DSnoT with its swap cycles.

The handlers are module functions of plain values (:func:`on_choice`, :func:`on_source`, :func:`on_total`,
:func:`on_export`), so the tests drive them without a page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app import allocation_form as af
from app import forms
from toolkit.errors import ToolkitError
from toolkit.spec.allocation import DEFAULT_LAMBDA, DEFAULT_OUTLIER_THRESHOLD
from toolkit.spec.refine import DEFAULT_CYCLES

NO_TABLE = "Fill the table from a run (its layers, weights and ratios), then edit the sparsity column."


@dataclass
class AllocationControls:
    """The allocation and refinement components of the Run form and how to read them."""

    choice: Any
    owl_m: Any
    owl_lambda: Any
    table: Any
    refine: Any
    cycles: Any

    @property
    def inputs(self) -> list[Any]:
        """The components the Run handler reads."""
        return [self.choice, self.owl_m, self.owl_lambda, self.table, self.refine, self.cycles]

    def read(self, data: dict[Any, Any]) -> af.AllocationSettings:
        """The settings from a Gradio ``{component: value}`` dict."""
        return af.AllocationSettings(choice=data[self.choice], owl_m=data[self.owl_m],
                                     owl_lambda=data[self.owl_lambda], table=data[self.table],
                                     refine=data[self.refine], cycles=data[self.cycles])


def _target(pattern: str, percent: Any, nm: str) -> Any:
    """The form's sparsity target, None when the form cannot say yet (its own check reports why)."""
    try:
        return forms.sparsity_target(pattern, percent, nm)
    except ToolkitError:
        return None


def on_total(table: Any, pattern: str, percent: Any, nm: str) -> str:
    """The line under the custom table (total, and whether it meets the slider's sparsity)."""
    if not af.rows_of(table):
        return NO_TABLE
    return af.total_line(table, _target(pattern, percent, nm))


def on_source(run_id: str, runs_dir: str) -> dict[str, Any]:
    """Fill the table from stored run ``run_id``: ``{table, percent}``, or ``{notice}`` when it cannot."""
    if not run_id:
        return {}
    try:
        rows, percent = af.table_from_run(run_id, runs_dir)
    except ToolkitError as exc:
        return {"notice": str(exc)}
    return {"table": rows, "percent": percent}


def on_choice(choice: str, table: Any, history: list[str] | None, runs_dir: str) -> dict[str, Any]:
    """What the groups show for ``choice``; choosing custom with an empty table offers the runs and fills it.

    Returns ``{owl, custom, sources, source}`` and, when it filled the table, ``table`` and ``percent``.
    The run filled from is the newest of this tab's ``history`` that has per-layer sparsity, else the
    store's newest.
    """
    update: dict[str, Any] = {"owl": choice == af.OWL, "custom": choice == af.CUSTOM}
    if choice != af.CUSTOM:
        return update
    sources = af.source_runs(runs_dir)
    mine = [run for run in reversed(history or []) if run in sources]
    pick = (mine or sources or [None])[0]
    update.update(sources=sources, source=pick)
    if not af.rows_of(table) and pick:
        update.update({k: v for k, v in on_source(pick, runs_dir).items() if k != "notice"})
    return update


def on_export(table: Any, pattern: str, percent: Any, nm: str, runs_dir: str) -> dict[str, Any]:
    """``{file}`` (the ratio file to download) or ``{notice}`` saying why the table cannot be exported."""
    try:
        return {"file": af.export(table, _target(pattern, percent, nm), runs_dir)}
    except ToolkitError as exc:
        return {"notice": str(exc)}


def controls(gr: Any, *, runs_dir: str, history: Any, sparsity: tuple[Any, Any, Any]) -> AllocationControls:
    """Lay out the allocation and refinement inputs and wire them; ``sparsity`` is (pattern, percent, nm)."""
    pattern, percent, nm = sparsity
    choice = gr.Radio(list(af.ALLOCATIONS), value=af.UNIFORM, label="Layer allocation (spreads the sparsity)",
                      info="OWL: layers with more outlier weights keep more; custom: your per-layer ratios",
                      elem_id="run-allocation-choice")
    with gr.Row(visible=False) as owl:
        owl_m = gr.Number(DEFAULT_OUTLIER_THRESHOLD, label="OWL M (outlier = score > M × mean)", elem_id="run-owl-m")
        owl_lambda = gr.Number(DEFAULT_LAMBDA, label="OWL λ (the ratios span 2λ around S)", elem_id="run-owl-lambda")
    with gr.Group(visible=False) as custom:
        with gr.Row():
            source = gr.Dropdown([], label="Fill from run", scale=3, elem_id="run-allocation-source")
            uniform = gr.Button("uniform at the slider", size="sm", scale=1, elem_id="run-allocation-uniform")
        table = gr.Dataframe(headers=af.HEADERS, value=[], type="array", datatype=["number", "number", "number"],
                             interactive=True, static_columns=[0, 2], max_height=260, elem_id="run-allocation-table")
        total = gr.Markdown(NO_TABLE, elem_id="run-allocation-total")
        with gr.Row():
            export = gr.Button("Export ratios (JSON for --allocation)", size="sm", elem_id="run-allocation-export")
            file = gr.File(label="ratio file", interactive=False, height=80, elem_id="run-allocation-file")
    with gr.Row():
        refine = gr.Radio(list(af.REFINES), value=af.NO_REFINE, label="Mask refinement",
                          info="DSnoT swaps pruned and kept weights per row, no training", elem_id="run-refine-choice")
        cycles = gr.Number(DEFAULT_CYCLES, precision=0, minimum=1, label="DSnoT cycles per row", visible=False,
                           elem_id="run-refine-cycles")
    found = AllocationControls(choice, owl_m, owl_lambda, table, refine, cycles)
    form = (pattern, percent, nm)

    def choose(value: str, rows: Any, past: list[str] | None) -> dict[Any, Any]:
        update = on_choice(value, rows, past, runs_dir)
        out: dict[Any, Any] = {owl: gr.update(visible=update["owl"]), custom: gr.update(visible=update["custom"])}
        if "sources" in update:
            out[source] = gr.update(choices=update["sources"], value=update["source"])
        out.update({table: update["table"], percent: update["percent"]} if "table" in update else {})
        return out

    def fill(run_id: str) -> dict[Any, Any]:
        update = on_source(run_id, runs_dir)
        if "notice" in update:
            gr.Warning(update["notice"])
        return {table: update["table"], percent: update["percent"]} if "table" in update else {}

    def save(rows: Any, pattern_value: str, percent_value: Any, nm_value: str) -> Any:
        update = on_export(rows, pattern_value, percent_value, nm_value, runs_dir)
        if "notice" in update:
            gr.Warning(update["notice"])
        return update.get("file")

    choice.change(choose, inputs=[choice, table, history], outputs=[owl, custom, source, table, percent], queue=False)
    source.input(fill, inputs=source, outputs=[table, percent], queue=False)
    uniform.click(af.uniform_rows, inputs=[table, percent], outputs=table, queue=False)
    for trigger in (table.change, pattern.change, percent.change, nm.change):
        trigger(on_total, inputs=[table, *form], outputs=total, queue=False, show_progress="hidden")
    export.click(save, inputs=[table, *form], outputs=file, queue=False)
    refine.change(lambda value: gr.update(visible=value == af.DSNOT), inputs=refine, outputs=cycles, queue=False)
    return found
