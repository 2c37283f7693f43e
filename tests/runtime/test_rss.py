"""The peak resident memory a run records is its own process's, not the process that started it.

Linux carries a parent's high-water mark into the child's ``ru_maxrss`` across ``fork``/``vfork`` + ``exec``: a
CLI started by a test suite at 5 GiB recorded a 5 GiB peak (``toolkit/runtime/rss.py``). Here the parent holds
1.5 GiB while it starts a child that allocates almost nothing; the child's recorded peak must stay far below.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from toolkit.runtime.rss import PROC_STATUS, peak_rss_mib, status_kib

HELD_MIB = 1536


@pytest.mark.skipif(not PROC_STATUS.exists(), reason="the high-water mark of a process is read from Linux's /proc")
def test_a_child_does_not_inherit_its_parents_peak() -> None:
    held = torch.ones(HELD_MIB * 2**20 // 4)  # 1.5 GiB touched (ones, not empty: every page resident)
    code = "from toolkit.run.provenance import peak_rss_mb; print(peak_rss_mb())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    child_peak = float(done.stdout.strip().splitlines()[-1])
    assert peak_rss_mib() > HELD_MIB  # the parent itself is above what it holds
    assert child_peak < HELD_MIB / 2, f"the child recorded {child_peak:.0f} MiB, its parent's peak, not its own"
    assert float(held[-1]) == 1.0


def test_status_fields_are_kib_or_none() -> None:
    rss = status_kib("VmRSS")
    assert rss is None or rss > 1024  # a Python process with torch loaded is above 1 MiB
    assert status_kib("NoSuchField") is None
