"""benchmarks.bench_scale on a tiny Llama shape: configs, the random checkpoint, the floor, the JSON line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_scale
from benchmarks.bench_scale import BenchError, ScaleOptions, measure, parse_set
from benchmarks.scale_configs import (
    BUILD_MARKER,
    SHAPES,
    build_checkpoint,
    checkpoint_report,
    hf_config,
    is_built,
    meta_parameters,
    param_count,
    shape_config,
)
from benchmarks.scale_floor import floor_ratios, floor_seconds

TINY = {**SHAPES["llama-2-7b"], "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300, "max_position_embeddings": 128}

RECORD_KEYS = {
    "shape", "layers", "stored_dtype", "method", "sparsity", "nsamples", "seqlen", "device", "forward_dtype",
    "prune_seconds", "seconds_per_layer", "rss_peak_mib", "rss_before_run_mib", "bf16_weight_bytes",
    "rss_peak_over_bf16_weights", "gpu_peak_mib", "checkpoint_bytes", "checkpoint_dtypes", "phases",
    "phase_layers", "floor_seconds_per_layer", "ratio_to_floor", "forward_phases_ratio_to_floor", "floor",
}


def test_llama_2_7b_has_6_74_billion_parameters() -> None:
    assert param_count(shape_config("llama-2-7b")) == pytest.approx(6.74e9, rel=0.01)
    assert param_count(shape_config("llama-2-70b")) == pytest.approx(6.9e10, rel=0.01)


def test_counts_from_shapes_match_the_meta_model() -> None:
    for name in ("llama-3-8b", "qwen2.5-7b"):  # GQA; qwen2 carries q, k, v biases
        shape = shape_config(name, 1)
        counted = sum(_numel(dims) for _, dims in meta_parameters(hf_config(shape, "bfloat16")))
        assert counted == param_count(shape)


def _numel(dims: tuple[int, ...]) -> int:
    total = 1
    for d in dims:
        total *= d
    return total


def test_layers_outside_the_model_are_refused() -> None:
    with pytest.raises(ValueError, match="--layers"):
        shape_config("llama-2-7b", 33)
    with pytest.raises(ValueError, match="unknown shape"):
        shape_config("gpt-5")


def test_random_checkpoint_loads_in_bf16_with_the_byte_tokenizer(tmp_path: Path) -> None:
    from toolkit.models.load import load_model
    from toolkit.models.sources import check_model_source
    from toolkit.models.tokenizers import ByteCodec

    folder = tmp_path / "ckpt"
    report = build_checkpoint(TINY, folder, "bfloat16", seed=0)
    assert report["params"] == param_count(TINY) and report["shards"] == 2
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == {p.name for p in folder.glob("*.safetensors")}
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"
    assert checkpoint_report(folder)["dtypes"] == ["BF16"]
    assert is_built(folder, TINY, "bfloat16", 0) and not is_built(folder, TINY, "float16", 0)
    check_model_source(str(folder))
    loaded = load_model(str(folder))
    assert isinstance(loaded.codec, ByteCodec)
    weights = loaded.model.state_dict()
    norm = weights["model.norm.weight"].float()
    assert float(norm.min()) == 1.0 and float(norm.max()) == 1.0
    q = weights["model.layers.0.self_attn.q_proj.weight"].float()
    assert 0.01 < float(q.std()) < 0.03


def test_floor_is_positive_and_scales_with_passes() -> None:
    floor = floor_seconds(TINY, nsamples=2, seqlen=16, device="cpu", forward_dtype="auto")
    assert floor["floor_seconds_per_layer"] > 0
    assert floor["compute_dtype"] == "float32" and floor["tokens"] == 32 and floor["passes"] == 2
    assert set(floor["linears"]) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def test_floor_ratios_count_the_forward_phases_per_layer() -> None:
    floor = {"floor_seconds_per_layer": 2.0}
    phases = {"capture": 1.0, "statistics": 2.0, "propagation": 4.0, "error": 1.0, "solve": 8.0}
    ratios = floor_ratios(floor, 8.0, phases, layers=2)
    assert ratios["ratio_to_floor"] == 4.0
    assert ratios["forward_phases_ratio_to_floor"] == pytest.approx((1 + 2 + 4 + 1) / 2 / 2)
    assert ratios["phase_ratio_to_floor"]["solve"] == 2.0
    assert floor_ratios(floor, 8.0, None, 2)["forward_phases_ratio_to_floor"] is None


def test_tiny_run_prints_every_key(tmp_path: Path) -> None:
    opts = ScaleOptions(nsamples=2, seqlen=32, device="cpu", save_model=True, workdir=str(tmp_path / "work"))
    record = measure("tiny-llama-2-7b", TINY, opts)
    assert not RECORD_KEYS - set(record), RECORD_KEYS - set(record)
    json.dumps(record)  # plain data
    assert record["layers"] == 1 and record["checkpoint_dtypes"] == ["BF16"]
    assert record["bf16_weight_bytes"] == 2 * param_count(TINY) and record["gpu_peak_mib"] is None
    assert record["build"]["subprocess"] is True and record["floor_seconds_per_layer"] > 0
    assert not any((tmp_path / "work").iterdir())  # the checkpoint and the runs were removed


def test_keep_reuses_a_complete_checkpoint(tmp_path: Path) -> None:
    opts = ScaleOptions(nsamples=1, seqlen=16, device="cpu", workdir=str(tmp_path), keep=True,
                        build_in_subprocess=False)
    first = measure("tiny", TINY, opts)
    second = measure("tiny", TINY, opts)
    assert first["build"]["reused"] is False and second["build"]["reused"] is True
    assert (tmp_path / "tiny-L1-bfloat16" / BUILD_MARKER).is_file()


def test_set_options_and_bad_items() -> None:
    assert parse_set(["alpha=1", " beta = x "]) == {"alpha": "1", "beta": "x"}
    with pytest.raises(BenchError, match="key=value"):
        parse_set(["alpha"])


def test_floor_only_prints_one_json_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "floor.jsonl"
    bench_scale.main(["--shape", "llama-2-7b", "--floor-only", "--nsamples", "1", "--seqlen", "4",
                      "--device", "cpu", "--json", str(out)])
    line = json.loads(capsys.readouterr().out.strip())
    assert line["benchmark"] == "scale_floor" and line["floor_seconds_per_layer"] > 0
    assert json.loads(out.read_text()) == line
