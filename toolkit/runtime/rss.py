"""Resident memory of the running process as the kernel reports it: the current size and the high-water mark.

The high-water mark is ``VmHWM`` of ``/proc/self/status`` (the peak of this process's own address space), not
``getrusage``'s ``ru_maxrss``: Linux carries the parent's high-water mark into ``ru_maxrss`` across
``fork``/``vfork`` + ``exec``, so a CLI started by a 5 GiB process (a test suite, a notebook kernel) reports
5 GiB however little it used itself. Where ``/proc`` has no ``VmHWM`` (macOS) ``ru_maxrss`` is the figure.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

PROC_STATUS = Path("/proc/self/status")


def status_kib(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmHWM``, ``VmRSS``), or None where there is none."""
    try:
        lines = PROC_STATUS.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far, MiB (``VmHWM``; ``ru_maxrss`` where Linux's ``/proc`` is absent)."""
    hwm = status_kib("VmHWM")
    if hwm is not None:
        return hwm / 1024
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss / 2**20 if sys.platform == "darwin" else maxrss / 1024  # bytes on macOS, KiB on Linux
