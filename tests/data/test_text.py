"""Text sources, calibration sampler and evaluation windows."""

from __future__ import annotations

import pytest
import torch

from toolkit.data.text import CalibSpec, calibration_windows, eval_windows, load_text
from toolkit.errors import ToolkitError


def test_calibration_is_seeded_and_shaped() -> None:
    tokens = torch.arange(10_000)
    a = calibration_windows(tokens, CalibSpec("x", 8, 100, seed=0))
    b = calibration_windows(tokens, CalibSpec("x", 8, 100, seed=0))
    c = calibration_windows(tokens, CalibSpec("x", 8, 100, seed=1))
    assert a.shape == (8, 100) and torch.equal(a, b) and not torch.equal(a, c)
    assert bool(((a[:, 1:] - a[:, :-1]) == 1).all())  # contiguous windows of the text
    with_bos = calibration_windows(tokens, CalibSpec("x", 2, 10), bos_id=-1)
    assert with_bos.shape == (2, 10) and bool((with_bos[:, 0] == -1).all())


def test_too_many_samples_is_clear() -> None:
    with pytest.raises(ToolkitError, match="lower --nsamples"):
        calibration_windows(torch.arange(100), CalibSpec("x", 4, 50))


def test_eval_windows_non_overlapping_remainder_dropped() -> None:
    windows = eval_windows(torch.arange(1050), 100)
    assert windows.shape == (10, 100) and int(windows[-1, -1]) == 999
    assert eval_windows(torch.arange(1050), 100, max_windows=3).shape == (3, 100)


def test_wiki_split_is_disjoint() -> None:
    train, test = load_text("wiki", "train"), load_text("wiki", "test")
    assert len(train) > 5 * len(test) > 0
    first_test_article = test.split("\n\n")[0]
    assert first_test_article not in train


def test_text_file_source(tmp_path) -> None:
    path = tmp_path / "mine.txt"
    path.write_text("hello world " * 100)
    assert load_text(str(path), "train").startswith("hello")
    with pytest.raises(ToolkitError):
        load_text(str(tmp_path / "missing.txt"), "train")
