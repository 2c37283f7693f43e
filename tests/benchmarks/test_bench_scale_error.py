"""bench_scale's ``--error`` and the ``smollm2-135m`` shape (the embedded model's own config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_scale
from benchmarks.bench_scale import ScaleOptions, measure, run_config_kwargs
from benchmarks.scale_configs import SHAPES, param_count, shape_config
from toolkit.models.load import load_model

TINY = {**SHAPES["smollm2-135m"], "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300,
        "max_position_embeddings": 128}
FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
          "vocab_size", "head_dim", "tie_word_embeddings", "max_position_embeddings")


def test_the_smollm2_shape_is_the_embedded_models_config() -> None:
    config = load_model("smollm2-135m").model.config
    shape = shape_config("smollm2-135m")
    for name in FIELDS:
        assert shape[name] == getattr(config, name), name
    assert param_count(shape) == pytest.approx(134.5e6, rel=0.01)  # tied head: counted once


def test_error_reaches_the_run_config_and_the_record(tmp_path: Path) -> None:
    args = bench_scale.make_parser().parse_args(["--shape", "smollm2-135m", "--error", "none"])
    opts = bench_scale.options_from(args)
    assert opts.error == "none" and run_config_kwargs(Path("m"), opts, "cpu", Path("r"))["error"] == "none"
    assert bench_scale.options_from(bench_scale.make_parser().parse_args(["--shape", "smollm2-135m"])).error == "sample"
    record = measure("tiny-smollm2", TINY, ScaleOptions(nsamples=2, seqlen=32, device="cpu", error="none",
                                                        workdir=str(tmp_path), build_in_subprocess=False))
    assert record["error"] == "none" and record["layer_error"]["measured"] is False
    assert record["layer_error"]["per_layer"] is None and record["run_cpu_seconds"] > 0
