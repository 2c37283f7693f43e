"""--allocation and --refine through a whole run: checked at the edge, applied, and in the run record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.api import RunConfig, prune_model
from toolkit.errors import ToolkitError

FAST = dict(model="tiny-llama", nsamples=4, seqlen=32, eval_seqlen=32, eval_windows=2)


@pytest.mark.parametrize(("kwargs", "words"), [
    (dict(method="wanda", sparsity="2:4", allocation="owl"), "2:4 fixes the count"),
    (dict(method="rtn", sparsity=None, quant="int8", allocation="owl"), "rtn quantizes only and prunes nothing"),
    (dict(method="numerical", sparsity="structured:20%", unit="heads", allocation="owl"), "plans its own"),
    (dict(method="awp", sparsity="50%", refine="dsnot", quant="int8"), "drop --refine or --quant"),
    (dict(method="rtn", sparsity=None, quant="int8", refine="dsnot"), "has none"),
    (dict(method="wanda", allocation="owl:5"), "two numbers"),
    (dict(method="wanda", refine="ria"), "unknown --refine"),
])
def test_bad_plan_options_fail_before_any_work(kwargs: dict, words: str, tmp_path: Path) -> None:
    with pytest.raises(ToolkitError, match=words):
        RunConfig(**FAST, out_dir=str(tmp_path), **kwargs)
    assert not any(tmp_path.iterdir())


def test_owl_and_dsnot_run_and_are_recorded(tmp_path: Path) -> None:
    result = prune_model(RunConfig(**FAST, method="wanda", sparsity="70%", allocation="owl:5,0.1", refine="dsnot:10",
                                   out_dir=str(tmp_path)))
    plan = result["allocation"]
    assert plan["kind"] == "owl" and len(plan["ratios"]) == 2
    assert plan["total"] == pytest.approx(0.7, abs=1e-12)
    assert result["refine"]["swaps"] > 0 and result["refine"]["label"] == "dsnot:10"
    saved = json.loads((Path(result["run_dir"]) / "config.json").read_text())
    assert (saved["allocation"], saved["refine"]) == ("owl:5,0.1", "dsnot:10")
    stored = json.loads((Path(result["run_dir"]) / "result.json").read_text())
    assert stored["allocation"]["ratios"] == plan["ratios"]


def test_uniform_runs_record_uniform_and_keep_their_reuse_key() -> None:
    config = RunConfig(**FAST, method="wanda")
    assert "allocation" not in config.reuse_key() and "refine" not in config.reuse_key()
    assert RunConfig(**FAST, method="wanda", allocation="owl").reuse_key()["allocation"] == "owl:5,0.08"
