"""Jupyter widgets.

Jupyter widgets over the same API and figures as the app (``toolkit.widgets`` is their public
path). A surface: imports the doors and the read side; never torch.
"""
