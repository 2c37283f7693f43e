"""The machine a run computes on.

The machine a run computes on: devices, forward precision (autocast), CPU threads and freed-memory
handling. May import :mod:`toolkit.events`, :mod:`toolkit.errors` and torch.
"""
