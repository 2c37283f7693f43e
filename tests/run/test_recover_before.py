"""The perplexity before a recovery is the parent's record only when it was measured on the same windows."""

from __future__ import annotations

import math

from toolkit.run.recover_before import recorded_before


def _result(ppl: float = 30.0, windows: int = 210, seqlen: int = 512, dataset: str = "wiki") -> dict:
    return {"ppl": {dataset: ppl}, "protocol": {"evaluation": {"dataset": dataset, "split": "test",
                                                               "seqlen": seqlen, "windows": windows}}}


def test_same_windows_give_the_record() -> None:
    assert recorded_before(_result(), "wiki", 512, 210) == 30.0


def test_other_windows_length_dataset_or_no_figure_measure() -> None:
    assert recorded_before(_result(), "wiki", 512, 16) is None  # --eval-windows cut them
    assert recorded_before(_result(), "wiki", 256, 210) is None
    assert recorded_before(_result(dataset="ptb"), "wiki", 512, 210) is None
    assert recorded_before({"ppl": {"wiki": 30.0}}, "wiki", 512, 210) is None  # no protocol recorded
    assert recorded_before(_result(ppl=math.nan), "wiki", 512, 210) is None
    assert recorded_before({"ppl": {}, "protocol": _result()["protocol"]}, "wiki", 512, 210) is None
