"""Overlay data: per-layer error and sparsity of each run, its perplexity, and one model only."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.helpers.synthetic_runs import write_run
from toolkit.compare import overlay
from toolkit.errors import ToolkitError
from toolkit.store.runs import open_run


def test_overlay_data_of_each_run(tmp_path: Path) -> None:
    records = [open_run(write_run(tmp_path, {"model": "tiny-llama", "method": m, "sparsity": "50%",
                                              "eval_data": "wiki", "seed": 3}, ppl=p, layers=3))
               for m, p in (("wanda", 31.0), ("sparsegpt", 27.0))]
    runs = overlay.overlay_runs(records)
    assert [r["name"] for r in runs] == ["Wanda 50%", "SparseGPT 50%"]
    assert [r["series"] for r in runs] == ["Wanda", "SparseGPT"] and runs[0]["seed"] == 3
    assert runs[0]["layer_error"] == pytest.approx([0.05, 0.10, 0.15])  # LayerDone.output_rel_error per layer
    assert runs[0]["layer_sparsity"] == pytest.approx([0.5, 0.5, 0.5])  # size-weighted SublayerPruned sparsity
    assert (runs[1]["ppl"], runs[1]["dense_ppl"], runs[1]["achieved_sparsity"]) == (27.0, 20.0, 0.5)
    assert math.isnan(runs[0]["accuracy"])  # no zero-shot tasks scored


def test_runs_of_two_models_are_refused_in_one_line(tmp_path: Path) -> None:
    records = [open_run(write_run(tmp_path, {"model": model, "method": "wanda", "sparsity": "50%"}))
               for model in ("tiny-llama", "tiny-opt")]
    with pytest.raises(ToolkitError, match=r"different models \(tiny-llama: Wanda 50%; tiny-opt: Wanda 50%\)") as err:
        overlay.overlay_runs(records)
    assert "\n" not in str(err.value)
    with pytest.raises(ToolkitError, match="pick one or more"):
        overlay.overlay_runs([])
