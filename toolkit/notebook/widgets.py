"""Jupyter widgets (ipywidgets + plotly FigureWidget) over the same events and figures as the app.

- :class:`Dashboard`: the Run view in a notebook: a small form, Run / Cancel, and the live
  heat-map, layer-error line, solver convergence and λ bisection, progress and warnings; for a
  structured run (numerical, flap, ...) the Newton traces, the global ranking and the kept-unit map; for
  a pruning run each layer's sparsity (``allocation`` uniform / owl / a file) and, with ``refine``
  dsnot, DSnoT's error before and after; with
  "generations", the dense and pruned greedy texts side by side (tokens/s). ``Dashboard().run()``
  runs in the cell (widgets refresh as it goes); the Run button runs in a background thread so
  Cancel stays clickable. When a run finishes, its figures are written under the widget as a
  regular output (images, kept in the saved notebook for every viewer) and into the live plots'
  widget state (so a re-opened notebook holds the final figures, not the empty first ones); a
  widget restored without its kernel says so in one line (:mod:`toolkit.notebook.kernel_note`).
  Making a dashboard turns off the Hugging Face progress bars (:mod:`toolkit.notebook.quiet`).
  :meth:`Dashboard.save` (and the "Save figures" button) writes the figures as PNG/PDF/SVG in a
  paper style.
- :func:`compare_masks`: keep-masks of two runs for one linear, their difference and overlap
  (:meth:`MaskComparison.save` exports them).
- :func:`sweep_plot`: perplexity vs sparsity, from the run store or by running a sweep; export it
  with :func:`save_figure`.

Like the app, this module reads events and run records only and never imports torch (CONTRIBUTING.md R7).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.api import CancelToken, RunConfig, list_methods, list_runs, open_run, run
from toolkit.compare import masks as compare
from toolkit.errors import ToolkitError
from toolkit.figures import masks as viz_masks
from toolkit.figures import sweep as viz_sweep
from toolkit.figures.paper import FORMATS, save_figure
from toolkit.figures.registry import ALLOCATION_ROW, FIGURES, ROWS, STRUCTURE_ROW
from toolkit.figures.registry import figure as view_figure
from toolkit.live.phase import format_seconds, progress_line
from toolkit.live.view import RunView
from toolkit.models.embedded import EMBEDDED_MODELS
from toolkit.notebook.background import BackgroundPanel
from toolkit.notebook.kernel_note import kernel_note
from toolkit.notebook.panels import (
    FIELD,
    FLEX_ROW,
    PANEL,
    PANEL_PX,
    STALE_NOTE,
    generations_html,
    snapshot_html,
)
from toolkit.notebook.quiet import quiet_progress_bars
from toolkit.spec.targets import NM, parse_sparsity
from toolkit.store.runs import RunRecord

__all__ = ["Dashboard", "MaskComparison", "compare_masks", "save_figure", "sweep_plot"]

REFRESH = 0.5  # seconds between widget refreshes while a run streams


def _copy_into(widget: Any, figure: Any) -> None:
    """Make FigureWidget ``widget`` show ``figure`` (traces replaced when their kinds change)."""
    same = len(widget.data) == len(figure.data) and all(
        a.type == b.type for a, b in zip(widget.data, figure.data, strict=True))
    if not same:
        widget.data = []
        widget.add_traces(list(figure.data))
    with widget.batch_update():
        if same:
            for old, new in zip(widget.data, figure.data, strict=True):
                old.update(new.to_plotly_json(), overwrite=True)
        widget.update_layout(figure.layout.to_plotly_json(), overwrite=True)


def keep_final_figure(widget: Any) -> None:
    """Write FigureWidget ``widget``'s current figure into its synced state, so a saved notebook keeps it.

    A FigureWidget sets its state (``_widget_data``, ``_widget_layout``) when made or displayed;
    later changes travel as restyle/relayout messages that the state the kernel holds (what
    nbclient and nbconvert save) never sees, so a re-opened notebook showed the empty first
    heat-map. This is the copy plotly's own ``_repr_mimebundle_`` makes; views are not redrawn.
    """
    from copy import deepcopy

    widget._widget_layout = deepcopy(widget._layout_obj._props)
    widget._widget_data = deepcopy(widget._data)


def _parse_options(text: str) -> dict[str, str]:
    options = {}
    for item in text.replace("\n", ",").split(","):
        if item.strip():
            key, sep, value = item.partition("=")
            if not sep:
                raise ToolkitError(f"options are key=value pairs separated by commas, got {item.strip()!r}")
            options[key.strip()] = value.strip()
    return options


def permute_offered(method: str, sparsity: str) -> bool:
    """Whether ``method`` at the sparsity text ``sparsity`` takes ``--permute`` (n:m, a method the catalogue marks)."""
    try:
        target = parse_sparsity(sparsity.strip()) if sparsity.strip() else None
    except ToolkitError:
        return False
    return isinstance(target, NM) and any(m["name"] == method and m["permute"] for m in list_methods())

class Dashboard(BackgroundPanel):
    """The Run view for notebooks; display it, then press Run or call :meth:`run`."""

    FIGURES = FIGURES

    def __init__(self, model: str = "smollm2-135m", method: str = "wanda", sparsity: str = "50%", *,
                 runs_dir: str = "runs", **protocol: Any) -> None:
        import ipywidgets as w
        import plotly.graph_objects as go

        settings = {"nsamples": 8, "seqlen": 128, "eval_seqlen": 128, "eval_windows": 16, "options": "", "quant": "",
                    "generate": False, "allocation": "uniform", "refine": "", **protocol}
        self.runs_dir = runs_dir
        field = w.Layout(**FIELD)
        self.model = w.Combobox(value=model, options=[*EMBEDDED_MODELS, "tiny-llama"], ensure_option=False,
                                description="model", placeholder="gemma-3-270m, a folder, a .gguf, a hub id",
                                layout=field)
        self.method = w.Dropdown(options=[m["name"] for m in list_methods()], value=method, description="method",
                                 layout=field)
        self.sparsity = w.Text(value=sparsity, description="sparsity", placeholder="50%, 2:4, structured:30%",
                               layout=field)
        self.quant = w.Text(value=str(settings.get("quant") or ""), description="quant",
                            placeholder="int4, int3:g64 (quantizing methods)", layout=field)
        self.options = w.Text(value=str(settings["options"]), description="options", placeholder="key=value, …",
                              layout=field)
        self.allocation = w.Text(value=str(settings["allocation"] or "uniform"), description="allocation",
                                 placeholder="uniform, owl, owl:5,0.08, ratios.json", layout=field)
        self.refine = w.Text(value=str(settings["refine"] or ""), description="refine", placeholder="dsnot, dsnot:50",
                             layout=field)
        self.permute = w.Checkbox(value=bool(settings.get("permute", False)), description="permute inputs (n:m)")
        self.nsamples = w.BoundedIntText(value=int(settings["nsamples"]), min=1, max=100000, description="nsamples",
                                         layout=field)
        self.seqlen = w.BoundedIntText(value=int(settings["seqlen"]), min=2, max=1 << 16, description="seqlen",
                                       layout=field)
        self.evaluate = w.Checkbox(value=True, description="evaluate")
        self.generate = w.Checkbox(value=bool(settings["generate"]), description="generations (dense vs pruned)")
        self.eval_windows = w.BoundedIntText(value=int(settings["eval_windows"]), min=0, max=1 << 20,
                                             description="eval windows", layout=field)
        self.eval_seqlen = int(settings["eval_seqlen"])
        self.run_button = w.Button(description="Run", button_style="primary")
        self.cancel_button = w.Button(description="Cancel", button_style="danger")
        self.status = w.HTML("Pick a model, a method and a sparsity, then Run.")
        self.save_button = w.Button(description="Save figures", tooltip="PNG, PDF and SVG in the run's folder")
        # widgets have a 2 px margin on each side: 100% would overflow the dashboard by 4 px
        self.warnings = w.Textarea(value="", description="warnings",
                                   layout=w.Layout(width="calc(100% - 8px)", height="60px"))
        self.result = w.HTML("")
        self.generations = w.HTML("", layout=w.Layout(width="calc(100% - 8px)"))
        self.snapshot = ""  # the finished run's figures as images: the output under the widget (kept when saved)
        self._kept: list[Any] = []  # display handles of that output, one per display of the dashboard
        self.kernel_note = kernel_note()
        # a FigureWidget sizes itself once, when attached: a set width keeps it inside its panel
        self.figures = {name: go.FigureWidget(view_figure(RunView(), name)).update_layout(width=PANEL_PX)
                        for name in self.FIGURES}
        self.view = RunView()
        self.result_dict: dict[str, Any] | None = None
        quiet_progress_bars()  # the status line says what loads; tqdm bars would stay in the saved notebook at 0 %
        super().__init__()
        self.run_button.on_click(lambda _: self.start())
        self.cancel_button.on_click(lambda _: self.cancel())
        self.save_button.on_click(lambda _: self._save_clicked())
        for source in (self.method, self.sparsity):
            source.observe(lambda _: self._offer_permute(), names="value")
        self._offer_permute()

        def row(*children: Any) -> Any:
            return w.HBox(list(children), layout=w.Layout(**FLEX_ROW))

        def panel(name: str) -> Any:
            return w.Box([self.figures[name]], layout=w.Layout(**PANEL))

        form = w.VBox([row(self.model, self.method, self.sparsity, self.quant),
                       row(self.options, self.nsamples, self.seqlen, self.eval_windows),
                       row(self.allocation, self.refine, self.permute),
                       row(self.evaluate, self.generate, self.run_button, self.cancel_button, self.save_button)],
                      layout=w.Layout(width="calc(100% - 8px)"))
        rows = {name: row(*(panel(figure) for figure in figures)) for name, figures in ROWS.items()}
        # shown only for structured runs: the global ranking of heads and channels, and what each layer kept
        self.structure = rows[STRUCTURE_ROW]
        self.structure.layout.display = "none"
        # shown for runs with a per-layer sparsity (unstructured, n:m); DSnoT's panel once it refined a linear
        self.allocation_row = rows[ALLOCATION_ROW]
        self.allocation_row.layout.display = "none"
        self.refine_panel = self.allocation_row.children[list(ROWS[ALLOCATION_ROW]).index("refine")]
        self.widget = w.VBox([self.kernel_note, form, self.status, *rows.values(), self.warnings, self.result,
                              self.generations], layout=w.Layout(width="100%", overflow="hidden"))

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """The widget, plus an HTML note for viewers without a kernel (nbconvert, GitHub)."""
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        bundle["text/html"] = f"<p><i>{STALE_NOTE}</i></p>"
        return bundle

    def _ipython_display_(self) -> None:
        """Show the widget, and under it the output that keeps the finished run's figures (updated at the end)."""
        from IPython.display import display

        display(self._repr_mimebundle_(), raw=True)
        self._kept.append(display(self._kept_bundle(), raw=True, display_id=True))

    def _kept_bundle(self) -> dict[str, str]:
        if not self.snapshot:
            return {"text/plain": ""}
        return {"text/html": self.snapshot, "text/plain": f"figures of run {self.view.run_id}: "
                + ", ".join(self.current_figures())}

    def _keep_final_figures(self) -> None:
        """Write the finished run's figures as images under the widget; keep them in the widget state."""
        figures = self.current_figures()
        self.snapshot = snapshot_html(list(figures.values()),
                                      f"figures of run {self.view.run_id} as images (kept in the saved notebook; "
                                      "if the dashboard above is blank or inert, its kernel is gone: re-run the cell)")
        for handle in self._kept:
            handle.update(self._kept_bundle(), raw=True)
        for widget in self.figures.values():
            keep_final_figure(widget)

    def _offer_permute(self) -> None:
        """The permute box is enabled for an n:m sparsity with a method that takes it (unticked otherwise)."""
        self.permute.disabled = not permute_offered(str(self.method.value), self.sparsity.value)
        if self.permute.disabled:
            self.permute.value = False

    def config(self, **overrides: Any) -> RunConfig:
        """The RunConfig of the form (``overrides`` win); raises ToolkitError for bad input."""
        sparsity = self.sparsity.value.strip() or None
        fields = {"model": self.model.value.strip(), "method": self.method.value, "sparsity": sparsity,
                  "quant": self.quant.value.strip() or None,
                  "options": _parse_options(self.options.value), "nsamples": self.nsamples.value,
                  "allocation": self.allocation.value.strip() or "uniform", "refine": self.refine.value.strip() or None,
                  "seqlen": self.seqlen.value, "eval_data": "wiki" if self.evaluate.value else None,
                  "eval_seqlen": self.eval_seqlen, "eval_windows": self.eval_windows.value or None,
                  "eval_dense": True, "generate": self.generate.value, "out_dir": self.runs_dir,
                  "permute": self.permute.value}
        fields.update(overrides)
        return RunConfig(**fields)

    def run(self, **overrides: Any) -> RunView:
        """Run in this cell (the widgets refresh as events arrive); returns the final RunView."""
        self._token = CancelToken()
        try:
            self._drive(self.config(**overrides), self._token)
        except ToolkitError as exc:
            self.status.value = f"<b>⚠ {exc}</b>"
        return self.view

    def _drive(self, config: RunConfig, token: CancelToken) -> None:
        self.view, self.result_dict, last = RunView(), None, -math.inf
        self.snapshot = self.generations.value = ""
        self.status.value = f"starting: loading {config.model}…"
        for event in run(config, token):
            self.view.apply(event, time.monotonic())
            if time.monotonic() - last >= REFRESH or event.kind in ("RunFinished", "RunFailed"):
                self.refresh()
                last = time.monotonic()
        self.refresh()
        record = Path(config.out_dir) / self.view.run_id
        if self.view.status == "finished" and (record / "result.json").exists():
            self.result_dict = open_run(record).result

    def refresh(self) -> None:
        """Redraw status, figures, warnings and result from :attr:`view`."""
        view, now = self.view, time.monotonic()
        self.status.value = f"<b>{view.status}</b> · {view.method} {view.sparsity} · {progress_line(view, now)}"
        for name, widget in self.figures.items():
            _copy_into(widget, view_figure(view, name))
        self.structure.layout.display = "flex" if view.structure.active else "none"
        self.allocation_row.layout.display = "flex" if view.allocation.applies else "none"
        self.refine_panel.layout.display = "flex" if view.allocation.refined else "none"
        self.warnings.value = "\n".join(view.warnings)
        self.generations.value = generations_html(view.evals.texts)
        if view.status == "finished":
            rows = "".join(f"<tr><td>{k}</td><td>{view.dense_ppl.get(k, math.nan):.3f}</td><td>{v:.3f}</td></tr>"
                           for k, v in view.ppl.items())
            self.result.value = (f"<table><tr><th>ppl</th><th>dense</th><th>pruned</th></tr>{rows}</table>"
                                 f"achieved sparsity {view.achieved_sparsity:.2%} · "
                                 + (f"{view.bits_per_weight:.3f} bits/weight · " if math.isfinite(view.bits_per_weight)
                                    else "") + "prune time "
                                 f"{format_seconds(view.prune_seconds)} · run {view.run_id}")
            if not self.snapshot:
                self._keep_final_figures()
        elif view.status in ("failed", "cancelled"):
            self.result.value = f"<b>{view.status}</b>: {view.error}"

    def current_figures(self) -> dict[str, Any]:
        """The dashboard's figures for :attr:`view` as plotly figures (the panels a run drew; empty ones left out)."""
        shown = {name: view_figure(self.view, name) for name in self.FIGURES}
        return {name: fig for name, fig in shown.items() if fig.data}

    def save(self, folder: str | Path | None = None, formats: Sequence[str] = FORMATS) -> list[Path]:
        """Write every drawn figure as ``<folder>/<name>.<format>`` in paper style; returns the files.

        ``folder`` defaults to ``figures/`` in the run's record. Raises :class:`ToolkitError` before
        a run has drawn anything, or for an unknown format.
        """
        figures = self.current_figures()
        if not self.view.run_id or not figures:
            raise ToolkitError("no figures yet: run the dashboard first, then save")
        target = Path(folder) if folder is not None else Path(self.runs_dir) / self.view.run_id / "figures"
        return [path for name, fig in figures.items() for path in save_figure(fig, target / name, formats)]

    def _save_clicked(self) -> None:
        try:
            written = self.save()
        except ToolkitError as exc:
            self.status.value = f"<b>⚠ {exc}</b>"
            return
        self.status.value += f" · saved {len(written)} files to {written[0].parent}"


def _record(run_ref: RunRecord | str | Path, runs_dir: str | Path) -> RunRecord:
    if isinstance(run_ref, RunRecord):
        return run_ref
    path = Path(run_ref)
    return open_run(path if path.is_dir() else Path(runs_dir) / str(run_ref))


@dataclass
class MaskComparison:
    """Figures comparing keep-masks; a notebook displays them all."""

    records: list[RunRecord]
    metrics: list[dict[str, Any]]
    masks: Any
    difference: Any
    overlap: Any
    histograms: Any
    group: int = 4

    def figures(self) -> list[Any]:
        """The figures of the chosen linear, in display order."""
        return [self.masks, self.difference, self.overlap, self.histograms]

    def every_linear(self) -> Any:
        """IoU, Hamming and group agreement for every linear the runs stored (loads all masks)."""
        return viz_masks.all_linears_overlap_figure(compare.all_linears(self.records, self.group))

    def _ipython_display_(self) -> None:
        from IPython.display import display

        for figure in self.figures():
            display(figure)

    def save(self, folder: str | Path, formats: Sequence[str] = FORMATS) -> list[Path]:
        """Write masks, difference, overlap and histograms as ``<folder>/<name>.<format>`` (paper style)."""
        names = ("masks", "difference", "overlap", "histograms")
        return [path for name, fig in zip(names, self.figures(), strict=True)
                for path in save_figure(fig, Path(folder) / name, formats)]


def compare_masks(run_a: RunRecord | str | Path, run_b: RunRecord | str | Path, *more: RunRecord | str | Path,
                  layer: int, linear: str, m: int = 4, runs_dir: str | Path = "runs") -> MaskComparison:
    """Compare the keep-masks of two (or more) runs for linear ``linear`` of decoder ``layer``.

    Runs are records, run folders or run ids under ``runs_dir``; ``m`` is the n:m group size of
    the group-agreement measure. Raises :class:`ToolkitError` for runs of different models or
    shapes. :meth:`MaskComparison.every_linear` adds the chart over every linear.
    """
    records = [_record(r, runs_dir) for r in (run_a, run_b, *more)]
    masks = compare.load_masks(records, layer, linear)
    labels = list(masks)
    rows = compare.pairwise(masks, m)
    return MaskComparison(
        records=records, metrics=rows, masks=viz_masks.mask_images_figure(masks),
        difference=viz_masks.mask_difference_figure(masks[labels[0]], masks[labels[1]], (labels[0], labels[1])),
        overlap=viz_masks.overlap_figure(rows), histograms=viz_masks.sparsity_histograms(masks), group=m)


def sweep_plot(*, model: str | None = None, methods: Sequence[str] = (), sparsities: Sequence[str] = (),
               runs_dir: str | Path = "runs", allocations: Sequence[str] = ("uniform",), **protocol: Any) -> Any:
    """Perplexity vs sparsity per method (and per allocation), dense as a reference line.

    With ``methods`` and ``sparsities`` it runs the sweep on ``model`` (``protocol``: RunConfig
    fields such as nsamples, seqlen, eval_windows), each sparsity once per ``allocations``
    (``uniform``, ``owl``: one line each), reusing runs already in the store; without them it plots
    every finished run of ``model`` in the store.
    """
    from toolkit.sweep import SweepPoint, dense_reference, plan, run_sweep, stored_points

    if methods and sparsities:
        base = RunConfig(model=model or "smollm2-135m", method=methods[0], out_dir=str(runs_dir), **protocol)
        configs, _ = plan(base, list(methods), list(sparsities), allocations=list(allocations))
        points = [p for p in run_sweep(configs) if isinstance(p, SweepPoint)]
    else:
        points = stored_points(list_runs(runs_dir), model)
    return viz_sweep.sweep_figure([p.to_dict() for p in points], dense_ppl=dense_reference(points),
                            title=f"perplexity vs sparsity · {model or 'all models'}")
