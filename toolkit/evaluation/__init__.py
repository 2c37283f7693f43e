"""What a compressed model is worth: perplexity, zero-shot accuracy, generations.

What a compressed model is worth: perplexity under the stated protocol, zero-shot accuracy through
lm-eval (offline task data), greedy generations. May import :mod:`toolkit.models`,
:mod:`toolkit.data`, :mod:`toolkit.runtime`, events and errors.
"""
