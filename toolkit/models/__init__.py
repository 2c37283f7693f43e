"""Models in and out: sources, loading, layers, structure, tokenizers, saving.

Models in and out: where a model comes from (:mod:`~toolkit.models.sources`, torch-free checks),
loading it (:mod:`~toolkit.models.load`), finding its decoder layers and linears
(:mod:`~toolkit.models.layers`), its per-family structure (heads, channels), tokenizers, and saving
it (dense, masked, pack-quantized, structurally shrunk). May import :mod:`toolkit.methods` (the
quantization grid), :mod:`toolkit.spec`, errors, torch and transformers.

``toolkit.models.load_model`` is :func:`toolkit.models.load.load_model` (a public path).
"""

from toolkit.models.load import LoadedModel, load_model

__all__ = ["LoadedModel", "load_model"]
