"""The vocabulary of a compression request, parsed once.

The vocabulary of a compression request, parsed once: sparsity targets (``50%``, ``2:4``,
``structured:30%``), quantization specs (``int4:g128``), structural units and their counts.

Owns :mod:`~toolkit.spec.targets` and :mod:`~toolkit.spec.compression`. Imports only
:mod:`toolkit.errors`; never torch (the app's form, the run store and the figures read it).
"""
