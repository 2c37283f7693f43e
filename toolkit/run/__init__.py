"""One run end to end.

One run end to end: its config (:mod:`~toolkit.run.config`), the named protocols
(:mod:`~toolkit.run.protocols`), checks before work, the pipeline
(load, calibrate, compress, save, evaluate, record), accounting and provenance, and the recovery of
a saved run by masked LoRA (:mod:`~toolkit.run.recover`). May import
everything below it (engine, evaluation, data, models, methods, store, spec); never a door or a
surface.
"""
