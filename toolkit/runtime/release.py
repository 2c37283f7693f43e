"""Give a finished run's memory back: collect what only cycles hold, then return the freed heap to the system.

A run's model, activations and solver state are unreachable once the run's frames end, but two things
keep the process's resident memory at the run's high-water mark, so a server that runs one job after
another grows by about a model per run (measured on the app: +600 MiB a run of the embedded model):

- **Cycles.** An exception keeps the frames it passed through (a run that failed after loading keeps
  its model through the traceback until the cycle collector happens to run); a collection now frees them.
- **The C heap.** :func:`toolkit.runtime.memory.keep_freed_memory` tells glibc to keep freed blocks
  (faster passes), and each worker thread allocates from its own arena: a run's freed tensors stay
  in the arenas of the threads that ran it, and the next run, on new threads, may take other arenas.
  ``malloc_trim(0)`` returns the free pages of every arena to the kernel (elsewhere than glibc: skipped).

:func:`release_memory` does both, and empties the CUDA cache where CUDA is in use. It is called where
a run ends (:func:`toolkit.api.run`, the app's jobs, the notebook panels' threads), never during one.
Imports no torch: the UI surfaces call it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import sys
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Released:
    """What one :func:`release_memory` did: resident MiB before and after (nan where unknown), heap trimmed."""

    rss_before_mib: float
    rss_after_mib: float
    trimmed: bool


def resident_mib() -> float:
    """The resident memory of this process in MiB (Linux ``/proc/self/statm``; nan elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return float("nan")
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _trim_heap() -> bool:
    """Call glibc's ``malloc_trim(0)``: free pages of every arena back to the kernel; False where there is no glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # musl or another libc: nothing to trim
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True


def _empty_cuda_cache() -> None:
    """Hand the CUDA caching allocator's free blocks back, where torch is loaded and CUDA in use."""
    torch = sys.modules.get("torch")  # never imported here: a process without torch has no CUDA cache
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def release_memory() -> Released:
    """Collect garbage (cycles included), empty the CUDA cache, trim the C heap; safe while other runs go on.

    Only memory nothing references is given back: a live run's tensors stay where they are.
    """
    before = resident_mib()
    gc.collect()
    _empty_cuda_cache()
    trimmed = _trim_heap()
    released = Released(before, resident_mib(), trimmed)
    log.info("memory released after a run: %.0f → %.0f MiB resident", released.rss_before_mib, released.rss_after_mib)
    return released
