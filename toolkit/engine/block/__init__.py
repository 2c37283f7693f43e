"""The driver of block-scope methods.

The driver of block-scope methods: score every layer, allocate one global budget
(:mod:`~toolkit.engine.block.plan`), remove heads and channels and shrink the modules
(:mod:`~toolkit.engine.block.shrink`), report what changed. May import what :mod:`toolkit.engine`
may, plus the engine's own lower modules (capture, state, write-back).
"""
