"""How many CPU threads a run's tensor ops use (no torch here: the app imports it).

On a small machine two runs' intra-op thread pools fight for the same cores: a pruning next to a
busy neighbour ran 3.5× slower with two threads each on two cores. When serving (the app) one
core is left for the web server and the browser; the command line uses torch's default (every
core, or ``OMP_NUM_THREADS``). ``--threads`` or ``PRUNELAB_THREADS`` overrides both. The count
used is reported in the run's protocol (``protocol["threads"]``).
"""

from __future__ import annotations

import os

from toolkit.errors import ToolkitError

ENV = "PRUNELAB_THREADS"


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def pick_threads(requested: int | None = None, *, serving: bool = False) -> int | None:
    """The intra-op thread count: ``requested``, else ``$PRUNELAB_THREADS``, else cores − 1 when ``serving``.

    None means torch's own default (the command line without an override). Raises
    :class:`ToolkitError` for a count below 1 or an unreadable ``PRUNELAB_THREADS``.
    """
    if requested is None and os.environ.get(ENV, "").strip():
        try:
            requested = int(os.environ[ENV])
        except ValueError:
            raise ToolkitError(f"{ENV} must be a whole number of threads, got {os.environ[ENV]!r}") from None
    if requested is not None:
        if requested < 1:
            raise ToolkitError(f"--threads must be ≥ 1, got {requested}")
        return requested
    return max(1, available_cores() - 1) if serving else None
