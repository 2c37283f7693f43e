"""result.json is strict JSON: a non-finite float is refused by the writer, and a finished run writes none."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from toolkit.api import RunConfig, prune_model
from toolkit.store.writer import RunWriter


def _strict(text: str) -> object:
    def refuse(constant: str) -> None:
        raise AssertionError(f"result.json holds {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_the_writer_refuses_a_non_finite_result(value: float, tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, {"method": "wanda"})
    with pytest.raises(ValueError, match="not JSON compliant"):
        writer.write_result({"allocation": {"outlier_threshold": value}})
    writer.fail("test", cancelled=False)


def test_an_owl_run_writes_finite_json(tmp_path: Path) -> None:
    result = prune_model(RunConfig(model="tiny-llama", method="wanda", sparsity="60%", allocation="owl:5,0.1",
                                   nsamples=2, seqlen=16, eval_seqlen=16, eval_windows=1, out_dir=str(tmp_path)))
    stored = _strict((Path(result["run_dir"]) / "result.json").read_text())
    assert isinstance(stored, dict) and stored["allocation"]["outlier_threshold"] == 5.0
