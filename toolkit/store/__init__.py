"""The run store on disk.

The run store on disk: a run folder's config, events, masks, quantization states and result
(written by :mod:`~toolkit.store.writer`, read by :mod:`~toolkit.store.runs`); reading damaged or
old (schema 1) runs; bounded reads that no file can hang (:mod:`~toolkit.store.reader`); showing a
folder's text without obeying it (:mod:`~toolkit.store.safe_text`). Torch-free; imports
:mod:`toolkit.spec`, events and errors only.
"""
