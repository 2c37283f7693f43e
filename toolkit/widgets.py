"""The public path of the notebook widgets (``from toolkit.widgets import Dashboard``); see :mod:`toolkit.notebook`."""

from toolkit.notebook.allocation import allocation_plot, refine_plot
from toolkit.notebook.recovery import RecoveryPanel, recover
from toolkit.notebook.widgets import Dashboard, MaskComparison, compare_masks, save_figure, sweep_plot

__all__ = ["Dashboard", "MaskComparison", "RecoveryPanel", "allocation_plot", "compare_masks", "recover", "refine_plot",
           "save_figure", "sweep_plot"]
