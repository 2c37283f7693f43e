"""Comparing runs.

Comparing runs: keep-masks of two runs side by side (overlap, differences, tiles) and structured
runs' kept units. Torch-free; imports :mod:`toolkit.store`, :mod:`toolkit.live`, events and errors.
"""
