"""Checks of a run's inputs made before any model loads or any file is written (CONTRIBUTING.md R9, R13).

Each check raises one :class:`ToolkitError` that names the input and says what to do; none of
them imports torch or transformers, loads weights or touches the network, so the CLI, the app's
form and :class:`toolkit.api.RunConfig` run them at once:

- :func:`check_model_source`: a name, a ``.gguf`` file, a checkpoint folder or a hub id;
- :func:`check_text_source`: a dataset name or a text file in the given encoding;
- :func:`check_window`: a sequence length and a window count (``prune`` and ``eval`` alike);
- :func:`check_writable_dir` / :func:`check_writable_file`: ``--out`` and ``--json``.

The model's own limits (positions) are checked once it is loaded (:mod:`toolkit.run.checks`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from toolkit.errors import ToolkitError


def check_window(seq_len: int, windows: int | None, seq_flag: str = "--seqlen",
                 windows_flag: str = "--windows") -> None:
    """Raise unless a window has ≥ 2 tokens (one predicted from another) and the window count is ≥ 1 or None."""
    if seq_len < 2:
        raise ToolkitError(f"{seq_flag} must be ≥ 2 (a window predicts each token from the ones before it), "
                           f"got {seq_len}")
    if windows is not None and windows < 1:
        raise ToolkitError(f"{windows_flag} must be ≥ 1 or 'all', got {windows}")


def check_writable_dir(folder: str | Path, flag: str = "--out") -> Path:
    """Create ``folder`` if needed and prove a file can be written in it; returns it.

    Raises when it is a file, cannot be created, or refuses a write (read-only, permissions, disk full).
    """
    path = Path(folder).expanduser()
    if path.exists() and not path.is_dir():
        raise ToolkitError(f"{flag} {str(folder)!r} is a file, not a folder; give a folder for the run store")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path) as probe:
            probe.write(b"prunelab write check")
            probe.flush()
    except OSError as exc:
        raise ToolkitError(f"cannot write in {flag} {str(folder)!r} ({exc.strerror or exc}); give a writable folder"
                           ) from None
    return path


def check_writable_file(file: str | Path, flag: str = "--json") -> None:
    """Raise unless ``file`` can be written: its folder exists and accepts a file, and it is not a folder."""
    path = Path(file).expanduser()
    if path.is_dir():
        raise ToolkitError(f"{flag} {str(file)!r} is a folder; give a file name")
    parent = path.parent
    if not parent.is_dir():
        raise ToolkitError(f"{flag} {str(file)!r}: folder {str(parent)!r} does not exist; create it first")
    check_writable_dir(parent, flag)
