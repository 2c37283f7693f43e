"""Resident pages of a memory-mapped checkpoint that no parameter reads any more, handed back to the kernel.

A safetensors checkpoint is mapped from its file (``MAP_PRIVATE``): the loaded parameters are views into the
mapping, and every page a pass has read stays resident, counted in the process's RSS, for as long as the
mapping lives, which is as long as any tensor of the file does. When the engine holds a decoder layer in
another dtype or on another device (a bfloat16 layer upcast to float32 for its passes), the layer's stored
bytes are read no more, yet their pages would stay resident beside the float32 copy: on a 7B layer 386 MiB.
Likewise the embeddings and the output head, read once by the capture of layer 0's inputs (and by a streamed
run's writing of them), are not read again until the model is saved or evaluated.

:func:`release_replaced` tells the kernel those pages are not needed (``madvise(MADV_DONTNEED)``). Only pages
that still hold the file's own bytes are released (``/proc/self/pagemap``: a file page, not an anonymous
copy-on-write page written through the mapping), so a later read of the same bytes faults back exactly what
was there. Memory that is not a private file mapping is never touched. Elsewhere than Linux: nothing is done.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from typing import BinaryIO

import torch
from torch import Tensor

MADV_DONTNEED = 4
_PAGE = mmap.PAGESIZE
_PRESENT, _SWAPPED, _FILE_OR_SHARED = 63, 62, 61  # bits of a /proc/self/pagemap entry


def _private_file_spans() -> list[tuple[int, int]]:
    """[start, end) addresses of this process's private mappings of regular files (/proc/self/maps)."""
    spans = []
    with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[1].endswith("p") and fields[4] != "0" and fields[5].startswith("/"):
                low, high = (int(x, 16) for x in fields[0].split("-"))
                spans.append((low, high))
    return spans


def _page_range(tensor: Tensor) -> tuple[int, int]:
    """[start, end) of the whole pages inside a contiguous CPU tensor's bytes (empty when it spans none)."""
    low = tensor.data_ptr()
    high = low + tensor.numel() * tensor.element_size()
    return -(-low // _PAGE) * _PAGE, high // _PAGE * _PAGE


def _clean_runs(pagemap: BinaryIO, start: int, stop: int) -> list[tuple[int, int]]:
    """Runs [a, b) of pages in [start, stop) that hold no anonymous (privately written or swapped) page."""
    first, count = start // _PAGE, (stop - start) // _PAGE
    pagemap.seek(first * 8)
    entries = torch.frombuffer(bytearray(pagemap.read(count * 8)), dtype=torch.int64)
    anonymous = ((entries >> _FILE_OR_SHARED) & 1) == 0
    written = anonymous & ((((entries >> _PRESENT) & 1) | ((entries >> _SWAPPED) & 1)) == 1)
    if not bool(written.any()):
        return [(start, stop)]
    runs, begin = [], None
    for index, dirty in enumerate(written.tolist()):
        if not dirty and begin is None:
            begin = index
        elif dirty and begin is not None:
            runs.append((start + begin * _PAGE, start + index * _PAGE))
            begin = None
    if begin is not None:
        runs.append((start + begin * _PAGE, stop))
    return runs


def release_replaced(old: list[Tensor]) -> int:
    """Release the resident file pages under ``old``; the bytes released.

    ``old``: tensors whose data was replaced, or that are not read for a while (a later read faults the same
    bytes back).

    Each tensor must be a view the caller holds (so its mapping stays alive during the call); CUDA tensors,
    non-contiguous ones and those outside a private file mapping are skipped.
    """
    if not sys.platform.startswith("linux"):
        return 0
    ranges = [_page_range(t) for t in old if t.device.type == "cpu" and t.is_contiguous()]
    ranges = [(a, b) for a, b in ranges if b > a]
    if not ranges:
        return 0
    spans = _private_file_spans()
    ranges = [(a, b) for a, b in ranges if any(low <= a and b <= high for low, high in spans)]
    if not ranges:
        return 0
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes, madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    released = 0
    with open("/proc/self/pagemap", "rb") as pagemap:
        for start, stop in ranges:
            for low, high in _clean_runs(pagemap, start, stop):
                if madvise(low, high - low, MADV_DONTNEED) == 0:
                    released += high - low
    return released
