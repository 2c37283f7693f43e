"""Large layers return freed memory to the kernel (a fixed glibc mmap threshold), set once per process."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_return_freed_memory_applies_unless_the_heap_keeps_it() -> None:
    code = ("from toolkit.runtime.memory import keep_freed_memory, return_freed_memory as r\n"
            "print(r(), r())\n"  # applied, and again (idempotent)
            "keep_freed_memory()\n"
            "print(r())\n")  # refused once the small-layer setting holds: the two never mix
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True", "False"]
