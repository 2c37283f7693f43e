"""The run store on disk.

The run store on disk: a run folder's config, events, masks, quantization states and result;
reading damaged or old (schema 1) runs. Torch-free; imports :mod:`toolkit.spec`, events and
errors only.
"""
