"""Plotly figure builders.

Plotly figure builders: pure functions from events, views and plain arrays to figures, shared by
the app, the widgets and the notebooks, and their export as paper figures. Torch-free; imports
:mod:`toolkit.live`, :mod:`toolkit.compare`, events and errors. :mod:`~toolkit.figures.registry`
names every Run-view figure once.
"""
