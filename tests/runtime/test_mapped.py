"""Releasing the resident pages of a memory-mapped checkpoint (toolkit/runtime/mapped.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from toolkit.runtime.mapped import release_replaced
from toolkit.runtime.release import resident_mib

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc/self/pagemap are Linux's")


@linux
def test_released_pages_leave_the_rss_and_read_back_the_same_bytes(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    torch.manual_seed(0)
    save_file({"a": torch.randn(2048, 4096).bfloat16(), "b": torch.randn(64, 64)}, str(path))
    with safe_open(str(path), framework="pt") as handle:
        a, b = handle.get_tensor("a"), handle.get_tensor("b")
    reference = a.clone()
    assert float(a.float().abs().sum()) > 0  # every page of a is read: resident
    before = resident_mib()
    released = release_replaced([a])
    assert released >= 15 * 2**20  # 16 MiB of bfloat16, less the partial pages at both ends
    assert resident_mib() < before - 10
    assert torch.equal(a, reference)  # faulted back from the file: the same bytes
    assert torch.isfinite(b).all()


@linux
def test_pages_written_through_the_mapping_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(1024, 4096)}, str(path))
    with safe_open(str(path), framework="pt") as handle:
        a = handle.get_tensor("a")
    a[0].fill_(3.0)  # a private copy-on-write page: the file still holds zeros
    a[-1].fill_(5.0)
    release_replaced([a])
    assert bool((a[0] == 3.0).all()) and bool((a[-1] == 5.0).all())
    assert float(a[1:-1].abs().sum()) == 0.0


def test_memory_that_is_not_a_file_mapping_is_left_alone() -> None:
    a = torch.randn(1024, 1024)
    reference = a.clone()
    assert release_replaced([a, torch.empty(0), a[:, ::2]]) == 0
    assert torch.equal(a, reference)
