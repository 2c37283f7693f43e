"""The machine a run computes on.

The machine a run computes on: devices, forward precision (autocast), CPU threads, freed-memory
handling, and giving a finished run's memory back (``release.py``). May import :mod:`toolkit.events`,
:mod:`toolkit.errors` and torch.
"""
