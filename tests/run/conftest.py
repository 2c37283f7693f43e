"""Fixtures of the recovery tests: a saved tiny parent run, and a fresh store holding a copy of it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers.recovery import parent_run


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny wanda 50% run with its model saved, in a store of its own (shared: tests never write into it)."""
    return parent_run(tmp_path_factory.mktemp("parent-store"))


@pytest.fixture
def store(parent: Path, tmp_path: Path) -> Path:
    """A fresh store holding a copy of the parent run (so each test sees only its own new runs)."""
    shutil.copytree(parent, tmp_path / parent.name)
    return tmp_path
