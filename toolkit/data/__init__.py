"""Text in: calibration and evaluation sources.

Text in: the calibration and evaluation sources (the embedded ``wiki``, text files, saved
datasets, hub datasets by name), their checks, tokenized caches, the calibration sampler and the
perplexity windows. May import :mod:`toolkit.models` (tokenizers, cache folder), errors and torch.
"""
