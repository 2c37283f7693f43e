"""Recovery in a notebook: fine-tune a saved run with its masks kept, the loss curve drawn live.

- :class:`RecoveryPanel`: run folder, steps, the training (lora | full), Recover / Cancel, the live loss curve
  (:func:`toolkit.figures.recovery.recovery_figure`) and perplexity before → after.
  ``RecoveryPanel(run).run()`` runs in the cell; the Recover button runs in a background thread so
  Cancel stays clickable. A finished recovery writes its curve into the plot's widget state so a saved
  notebook keeps it; restored without its kernel, the panel says so in one line; making a panel turns off the
  Hugging Face progress bars (as the dashboard does).
- :func:`recover`: display a panel and run it in the cell; returns the panel (``panel.result`` is
  the new run's result dict).

Like the other widgets, this module reads events only and never imports torch (CONTRIBUTING.md R7).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from toolkit.api import CancelToken, recover_model
from toolkit.errors import RunCancelled, ToolkitError
from toolkit.events import Event
from toolkit.figures.recovery import recovery_figure
from toolkit.live.recovery import RecoveryView
from toolkit.notebook.background import BackgroundPanel
from toolkit.notebook.kernel_note import kernel_note
from toolkit.notebook.panels import FIELD, FLEX_ROW, PANEL_PX
from toolkit.notebook.quiet import quiet_progress_bars
from toolkit.notebook.widgets import _copy_into, keep_final_figure
from toolkit.run.recover_config import DEFAULT_STEPS, TRAINS

REFRESH = 0.5  # seconds between redraws while a recovery streams


class RecoveryPanel(BackgroundPanel):
    """A recovery of one saved run for notebooks; display it, then press Recover or call :meth:`run`.

    ``run`` is a run folder (or a run id under ``runs_dir``) saved with ``--save-model``;
    ``train`` is ``lora`` (masked-LoRA adapters, merged) or ``full`` (the linears trained directly), a
    toggle on the panel. ``settings`` are further :func:`toolkit.api.recover_model` settings (rank,
    alpha, lr, batch_size, seqlen, seed, eval_windows, device, out_dir, loss).
    """

    busy = "A recovery is going on; cancel it first."

    def __init__(self, run: str | Path = "", *, steps: int = DEFAULT_STEPS, runs_dir: str | Path = "runs",
                 train: str = "lora", **settings: Any) -> None:
        import ipywidgets as w
        import plotly.graph_objects as go

        self.runs_dir, self.settings = Path(runs_dir), settings
        field = w.Layout(**FIELD)
        self.run_box = w.Text(value=str(run), description="run", placeholder="runs/<id> (saved with --save-model)",
                              layout=field)
        self.steps = w.BoundedIntText(value=steps, min=1, max=1_000_000, description="steps", layout=field)
        if train not in TRAINS:
            raise ToolkitError(f"unknown train={train!r}: use lora (masked-LoRA adapters) or full (the linear "
                               "weights themselves)")
        self.train = w.ToggleButtons(options=list(TRAINS), value=train, description="train",
                                     tooltips=["masked-LoRA adapters, merged", "the linear weights themselves"])
        self.recover_button = w.Button(description="Recover", button_style="primary")
        self.cancel_button = w.Button(description="Cancel", button_style="danger")
        self.status = w.HTML("Give a run with a saved model, then Recover.")
        self.result_html = w.HTML("")
        self.figure = go.FigureWidget(recovery_figure(RecoveryView())).update_layout(width=PANEL_PX)
        self.view = RecoveryView()
        self.result: dict[str, Any] | None = None
        self.kernel_note = kernel_note()
        quiet_progress_bars()  # loading the saved model would leave "Loading weights: 0%" in the notebook
        super().__init__()
        self._drawn, self._final = -math.inf, False
        self.recover_button.on_click(lambda _: self.start())
        self.cancel_button.on_click(lambda _: self.cancel())
        form = w.HBox([self.run_box, self.steps, self.train, self.recover_button, self.cancel_button],
                      layout=w.Layout(**FLEX_ROW))
        self.widget = w.VBox([self.kernel_note, form, self.status, self.figure, self.result_html],
                             layout=w.Layout(width="100%"))

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """The widget."""
        return dict(self.widget._repr_mimebundle_(**kwargs) or {})

    def _run_dir(self) -> Path:
        text = self.run_box.value.strip()
        path = Path(text)
        return path if path.is_dir() or not text else self.runs_dir / text

    def run(self, **overrides: Any) -> RecoveryView:
        """Recover in this cell (the curve redraws as steps arrive); returns the final view.

        ``overrides`` replace settings for this call. Bad input and failures show in :attr:`status`.
        """
        self._token, self.view, self.result = CancelToken(), RecoveryView(), None
        self.result_html.value, self._final = "", False
        self.status.value = f"starting: loading the saved model of {self.run_box.value}…"
        try:
            self.result = recover_model(run=self._run_dir(), steps=int(self.steps.value), on_event=self._on_event,
                                        cancel=self._token, **{"train": self.train.value, **self.settings,
                                                               **overrides})
        except (ToolkitError, RunCancelled) as exc:
            if self.view.status in ("idle", "running"):
                self.view.status, self.view.error = ("cancelled" if isinstance(exc, RunCancelled) else "failed",
                                                     str(exc))
            self.status.value = f"<b>⚠ {exc}</b>"
        self.refresh()
        return self.view

    def _on_event(self, event: Event) -> None:
        self.view.apply(event)
        if time.monotonic() - self._drawn >= REFRESH or event.kind in ("RunFinished", "RunFailed"):
            self.refresh()
            self._drawn = time.monotonic()

    def refresh(self) -> None:
        """Redraw status, curve and result from :attr:`view`."""
        view = self.view
        if view.status != "idle":
            self.status.value = f"<b>{view.status_line()}</b>"
        _copy_into(self.figure, recovery_figure(view))
        if view.status == "finished" and not self._final:  # once: the saved widget state keeps the final curve
            self._final = True
            keep_final_figure(self.figure)
        if view.status == "finished":
            rows = "".join(f"<tr><td>{name}</td><td>{before:.3f}</td><td>{after:.3f}</td></tr>"
                           for name, before, after in view.result_rows())
            self.result_html.value = (f"<table><tr><th>ppl</th><th>before</th><th>after</th></tr>{rows}</table>"
                                      f"recovered run {view.run_id} (parent {view.parent}, masks kept)")


def recover(run: str | Path, *, steps: int = DEFAULT_STEPS, runs_dir: str | Path = "runs", train: str = "lora",
            **settings: Any) -> RecoveryPanel:
    """Display a :class:`RecoveryPanel` for ``run`` and recover it in this cell; returns the panel."""
    from IPython.display import display

    panel = RecoveryPanel(run, steps=steps, runs_dir=runs_dir, train=train, **settings)
    display(panel)
    panel.run()
    return panel
