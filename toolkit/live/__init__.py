"""Live view-models of a run.

Live view-models of a run: events folded into plain state (errors per layer and linear, solver
traces, evaluation progress, structure changes, the phase line). Torch-free; imports
:mod:`toolkit.events` only.
"""
