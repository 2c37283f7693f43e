"""Block-scope methods: whole attention heads and MLP channels.

Block-scope methods: whole attention heads and MLP channels scored, removed and compensated
(Numerical Pruning, FLAP, Wanda-sp, magnitude-sp). Pure tensor functions on a decoder layer's
statistics; the engine (:mod:`toolkit.engine.block`) gathers them and applies the result.
May import what :mod:`toolkit.methods` may.
"""
