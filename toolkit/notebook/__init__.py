"""Jupyter widgets.

Jupyter widgets over the same API and figures as the app (``toolkit.widgets`` is their public
path): the run dashboard and mask comparisons (:mod:`~toolkit.notebook.widgets`), recovery with its
live loss curve (:mod:`~toolkit.notebook.recovery`), a stored run's per-layer sparsity and DSnoT's
refinement (:mod:`~toolkit.notebook.allocation`). A surface: imports the doors and the read
side; never torch.
"""
