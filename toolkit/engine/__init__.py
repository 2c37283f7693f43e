"""The sequential layer-by-layer driver.

The sequential layer-by-layer driver: capture a decoder layer's inputs, gather the statistics a
method asks for, call the method, write the result back through a journal, propagate to the next
layer (:mod:`~toolkit.engine.prune` is the entry; :mod:`~toolkit.engine.linear` one layer of a
linear-scope method; :mod:`toolkit.engine.block` block-scope methods; parallel and distributed
variants), and the recovery fine-tune of a pruned model (:mod:`~toolkit.engine.lora`, masked LoRA;
:mod:`~toolkit.engine.finetune`, its training steps). May import :mod:`toolkit.methods`,
:mod:`toolkit.models`, :mod:`toolkit.runtime`, :mod:`toolkit.spec`, events and errors; never
:mod:`toolkit.run`, the doors or a surface.
"""
