"""The command line (``python -m toolkit``).

The command line (``python -m toolkit``): argument parsing, checks before work, progress bars and
tables fed by events. A surface: may import the doors and everything below them.
"""
