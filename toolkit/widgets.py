"""The public path of the notebook widgets (``from toolkit.widgets import Dashboard``); see :mod:`toolkit.notebook`."""

from toolkit.notebook.widgets import Dashboard, MaskComparison, compare_masks, save_figure, sweep_plot

__all__ = ["Dashboard", "MaskComparison", "compare_masks", "save_figure", "sweep_plot"]
