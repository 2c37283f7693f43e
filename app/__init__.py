"""PruneLab's Gradio app: Run, Sweep, Compare masks, Runs (see :func:`app.app.build_app`).

A thin client of :mod:`toolkit.api`: it consumes events and run records and never imports torch
(CONTRIBUTING.md R7; ``tests/app/test_app.py`` scans the imports).
"""
