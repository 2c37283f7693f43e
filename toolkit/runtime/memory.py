"""Process memory settings that make large-batch CPU passes faster.

glibc serves every allocation above ``M_MMAP_THRESHOLD`` (at most 32 MiB by default) with a fresh
``mmap``, and returns it to the kernel on free: each new activation of a fused layer pass
(hundreds of MiB for 32 × 512 tokens) is then page-faulted and zero-filled again. Raising the
threshold and the trim threshold lets freed blocks be reused from the heap; measured on the
embedded model, one decoder-layer pass over 32 × 512 tokens took ≈ 29 % less time
(``benchmarks/`` numbers include it). Elsewhere (not glibc) this is a no-op.

The heap then keeps what it freed, so the resident memory stays at the run's high-water mark plus
fragmentation; measured on a Llama-2-7B-shaped layer (hidden 4096, MLP 11008) on a CPU, Wanda's peak
rose from 4.7 to 5.9 GiB. The engine therefore applies it only to models whose decoder layers are
small (:data:`KEEP_FREED_MAX_LAYER_BYTES`), where the page faults cost time and the memory is cheap.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
SETTINGS = ((M_MMAP_THRESHOLD, 1 << 30), (M_TRIM_THRESHOLD, 1 << 30), (M_TOP_PAD, 256 << 20))
KEEP_FREED_MAX_LAYER_BYTES = 256 << 20  # float32 bytes of one decoder layer (SmolLM2-135M: 14 MiB; a 7B: 772 MiB)
_done = False


def keep_freed_memory() -> bool:
    """Apply :data:`SETTINGS` with glibc's ``mallopt`` once per process; True if applied."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl or another libc: nothing to tune
        return False
    _done = all(mallopt(ctypes.c_int(param), ctypes.c_int(value)) == 1 for param, value in SETTINGS)
    if not _done:
        log.info("mallopt refused a setting; large CPU passes may be slower")
    return _done


RETURN_MMAP_THRESHOLD = 1 << 20  # bytes: allocations from here on get their own mapping, unmapped when freed


def return_freed_memory() -> bool:
    """Fix glibc's mmap threshold at :data:`RETURN_MMAP_THRESHOLD` (once per process; True if applied).

    The opposite of :func:`keep_freed_memory`, for large decoder layers: by default glibc raises the threshold
    to the size of each freed mapping (up to 32 MiB), so the activations, masks and scores of a 7B layer (1 to
    32 MiB each) come from the heap, whose freed holes are kept; measured on a Llama-2-7B-shaped layer (Wanda,
    2 × 256 tokens), the resident peak fell from 3106 to 2841 MiB. A no-op off glibc, and once
    :func:`keep_freed_memory` was applied in this process.
    """
    if _done or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return mallopt(ctypes.c_int(M_MMAP_THRESHOLD), ctypes.c_int(RETURN_MMAP_THRESHOLD)) == 1
