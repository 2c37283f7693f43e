"""The speed harness (toolkit/evaluation/speed.py) on tiny-llama: what it returns, never how fast."""

from __future__ import annotations

import math

import pytest
import torch

from toolkit.errors import ToolkitError
from toolkit.evaluation.generate import context_limit
from toolkit.evaluation.speed import Throughput, check_speed_args, compare, decode_tokens_per_s
from toolkit.models.load import load_model


def test_compare_measures_every_model_at_every_batch_and_leaves_them_as_they_were() -> None:
    dense, other = load_model("tiny-llama").model, load_model("tiny-llama").model
    other.train()
    before = {k: v.clone() for k, v in dense.state_dict().items()}
    result = compare([dense, other], list(range(1, 9)), "cpu", batches=(1, 3), new_tokens=3, repeats=2)
    assert [[t.batch for t in row] for row in result] == [[1, 3], [1, 3]]
    for t in (t for row in result for t in row):
        assert (t.prompt_tokens, t.new_tokens, t.repeats) == (8, 3, 2)
        assert all(math.isfinite(v) and v > 0 for v in (t.prefill_tokens_per_s, t.decode_tokens_per_s,
                                                         t.tokens_per_s))
    assert not dense.training and other.training  # modes restored
    assert all(torch.equal(before[k], v) for k, v in dense.state_dict().items())
    assert set(result[0][0].to_dict()) == {"batch", "prompt_tokens", "new_tokens", "repeats", "prefill_tokens_per_s",
                                           "decode_tokens_per_s", "tokens_per_s"}


def test_the_prompt_is_cut_to_the_context_left_for_the_new_tokens() -> None:
    model = load_model("tiny-llama").model
    limit = context_limit(model)
    (row,) = compare([model], [5] * (limit + 10), "cpu", batches=(1,), new_tokens=4, repeats=1)
    assert row[0].prompt_tokens == limit - 4


def test_the_batch_one_rate_is_the_whole_pass() -> None:
    rate = decode_tokens_per_s(load_model("tiny-llama").model, [1, 2, 3], "cpu", new_tokens=3, repeats=1)
    assert math.isfinite(rate) and rate > 0


def test_the_summary_is_the_median_of_each_figure() -> None:
    from toolkit.evaluation.speed import _summary

    # (prefill s, decode s) per repeat: batch 2, 4 prompt tokens, 5 new tokens (4 decode steps)
    got = _summary([(1.0, 2.0), (2.0, 1.0), (4.0, 4.0)], batch=2, prompt_tokens=4, new_tokens=5)
    assert got == Throughput(2, 4, 5, 3, prefill_tokens_per_s=4.0, decode_tokens_per_s=4.0, tokens_per_s=5 / 3)


@pytest.mark.parametrize(("batches", "new_tokens", "repeats", "prompt", "message"), [
    ((0, 8), 4, 1, 1, "batch sizes must be ≥ 1"), ((), 4, 1, 1, "batch sizes"),
    ((1,), 1, 1, 1, "new tokens must be ≥ 2"), ((1,), 4, 0, 1, "repeats"), ((1,), 4, 1, 0, "prompt tokens")])
def test_bad_counts_are_refused(batches: tuple[int, ...], new_tokens: int, repeats: int, prompt: int,
                                message: str) -> None:
    with pytest.raises(ToolkitError, match=message):
        check_speed_args(batches, new_tokens, repeats, prompt)


def test_an_empty_prompt_is_refused() -> None:
    with pytest.raises(ToolkitError, match="empty"):
        compare([load_model("tiny-llama").model], [], "cpu")
