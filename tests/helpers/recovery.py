"""Parent runs for the recovery tests: a tiny pruned run with its model saved, and a fingerprint of a folder.

The fixtures ``parent`` and ``store`` (:func:`parent_fixture`, :func:`store_fixture`) are shared by
tests/run/conftest.py and the app's Recover panel tests, which import them (pytest finds a fixture among
a test module's or a conftest's names, and calls it by its ``name``).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from toolkit.api import RunConfig, prune_model
from toolkit.models.layers import decoder_layers, get_weight, layer_linears
from toolkit.models.load import load_model
from toolkit.store.runs import open_run

FAST = {"model": "tiny-llama", "nsamples": 2, "seqlen": 32, "eval_seqlen": 32, "eval_windows": 2}


def parent_run(root: Path, **fields: Any) -> Path:
    """A finished tiny run (wanda 50% unless ``fields`` say otherwise) with ``model/`` saved; its folder."""
    result = prune_model(RunConfig(**{**FAST, **fields}, out_dir=str(root), save_model=True))
    return Path(result["run_dir"])


@pytest.fixture(scope="module", name="parent")
def parent_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny wanda 50% run with its model saved, in a store of its own (shared: tests never write into it)."""
    return parent_run(tmp_path_factory.mktemp("parent-store"))


@pytest.fixture(name="store")
def store_fixture(parent: Path, tmp_path: Path) -> Path:
    """A fresh store holding a copy of the parent run (so each test sees only its own new runs)."""
    shutil.copytree(parent, tmp_path / parent.name)
    return tmp_path


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` → the SHA-256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def pruned_nonzero(model_dir: Path, masks_run: Path) -> tuple[int, int]:
    """(weights the run's stored keep-masks drop that are nonzero in the checkpoint, weights they drop)."""
    model = load_model(str(model_dir)).model
    record = open_run(masks_run)
    stray = dropped = 0
    for index, layer in enumerate(decoder_layers(model)):
        for name, module in layer_linears(layer).items():
            keep = torch.from_numpy(record.load_mask(index, name))
            weight = get_weight(module)
            stray += int(torch.count_nonzero(weight[~keep]))
            dropped += int((~keep).sum())
    return stray, dropped
