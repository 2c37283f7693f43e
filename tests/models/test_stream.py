"""Streamed checkpoints: decoder layers on meta until loaded, shard checks, and the layer-by-layer writer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from toolkit.errors import ToolkitError
from toolkit.models.load import load_model
from toolkit.models.save import save_checkpoint
from toolkit.models.sources import SAFETENSORS_INDEX, check_shards
from toolkit.models.stream import REST_SHARD, ShardWriter, layer_shard, open_streamed
from toolkit.models.tokenizers import BYTES_MARKER

NEEDS = "streaming needs a local safetensors checkpoint folder"


def save_tiny(folder: Path, family: str = "llama", dtype: str = "bfloat16", shard_size: str | None = None) -> Path:
    """A tiny random model saved as a checkpoint (sharded with an index when ``shard_size`` is given)."""
    loaded = load_model(f"tiny-{family}", dtype=dtype)
    if shard_size is None:
        return save_checkpoint(loaded.model, loaded.codec, folder)
    model: Any = loaded.model  # a transformers PreTrainedModel
    model.save_pretrained(folder, max_shard_size=shard_size)
    (folder / BYTES_MARKER).write_text(json.dumps({"tokenizer": "bytes", "bos_id": 256}))
    return folder


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("src") / "sharded", shard_size="50KB")


@pytest.fixture(scope="module")
def tied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("src") / "opt", family="opt")


def _copy(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / folder.name))


def _drop(folder: Path, keys: set[str]) -> None:
    """Remove ``keys`` from the shards that hold them and from the index (an incomplete download)."""
    index = json.loads((folder / SAFETENSORS_INDEX).read_text())
    for shard in {index["weight_map"][k] for k in keys}:
        tensors = load_file(folder / shard)
        save_file({k: v for k, v in tensors.items() if k not in keys}, folder / shard, metadata={"format": "pt"})
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if k not in keys}
    (folder / SAFETENSORS_INDEX).write_text(json.dumps(index))


@pytest.mark.parametrize("which", ["sharded", "tied"])
def test_layers_on_meta_until_loaded_and_equal_to_load_model(which: str, request: pytest.FixtureRequest) -> None:
    folder: Path = request.getfixturevalue(which)
    reference = load_model(str(folder)).model
    streamed = open_streamed(folder)
    model: Any = streamed.loaded.model
    assert streamed.dtype is torch.bfloat16
    assert {p.device.type for p in streamed.layers.parameters()} == {"meta"}
    assert all(p.device.type == "cpu" for n, p in model.named_parameters() if not n.startswith(streamed.prefix))
    if which == "tied":
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    for name, buffer in reference.named_buffers():  # rotary tables computed for real, in their own dtype
        assert torch.equal(model.get_buffer(name), buffer), name
    for index, layer in enumerate(streamed.layers):
        streamed.load_layer(index, layer)
    ours, theirs = model.state_dict(), reference.state_dict()
    assert ours.keys() == theirs.keys()
    for key, value in theirs.items():
        assert ours[key].dtype == value.dtype and torch.equal(ours[key], value), key
    window = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model(window).logits, reference(window).logits)
    for index, layer in enumerate(streamed.layers):
        streamed.release_layer(index, layer)
    assert {p.device.type for p in streamed.layers.parameters()} == {"meta"}


def test_check_shards_returns_the_weight_map(sharded: Path, tied: Path) -> None:
    weight_map = check_shards(sharded)
    assert len(set(weight_map.values())) > 2
    assert weight_map == json.loads((sharded / SAFETENSORS_INDEX).read_text())["weight_map"]
    single = check_shards(tied)
    assert set(single.values()) == {"model.safetensors"}
    assert "model.decoder.layers.1.fc2.weight" in single


def test_missing_shard_file_is_named(sharded: Path, tmp_path: Path) -> None:
    folder = _copy(sharded, tmp_path)
    shard = json.loads((folder / SAFETENSORS_INDEX).read_text())["weight_map"]["model.layers.1.mlp.up_proj.weight"]
    (folder / shard).unlink()
    with pytest.raises(ToolkitError, match=f"shard {shard} .* does not exist"):
        check_shards(folder)
    with pytest.raises(ToolkitError, match=f"shard {shard}"):
        open_streamed(folder)


def test_layer_without_tensors_is_named(sharded: Path, tmp_path: Path) -> None:
    folder = _copy(sharded, tmp_path)
    _drop(folder, {k for k in check_shards(folder) if k.startswith("model.layers.1.")})
    with pytest.raises(ToolkitError, match=r"decoder layer 1 has no tensors \(model\.layers\.1\.\*\)"):
        check_shards(folder)


def test_missing_tensor_names_layer_and_tensor(sharded: Path, tmp_path: Path) -> None:
    folder = _copy(sharded, tmp_path)
    _drop(folder, {"model.layers.1.mlp.up_proj.weight"})
    check_shards(folder)  # every layer still has tensors: only the model knows one is missing
    with pytest.raises(ToolkitError, match=r"decoder layer 1 tensor model\.layers\.1\.mlp\.up_proj\.weight is missing"):
        open_streamed(folder)


def test_index_naming_a_tensor_its_shard_lacks(sharded: Path, tmp_path: Path) -> None:
    folder = _copy(sharded, tmp_path)
    index = json.loads((folder / SAFETENSORS_INDEX).read_text())
    index["weight_map"]["model.layers.0.extra.weight"] = index["weight_map"]["model.norm.weight"]
    (folder / SAFETENSORS_INDEX).write_text(json.dumps(index))
    with pytest.raises(ToolkitError, match=r"tensor model\.layers\.0\.extra\.weight in .* does not hold it"):
        check_shards(folder)


def test_truncated_shard_header(tied: Path, tmp_path: Path) -> None:
    folder = _copy(tied, tmp_path)
    (folder / "model.safetensors").write_bytes(b"\xff" * 12)
    with pytest.raises(ToolkitError, match="not a safetensors file"):
        check_shards(folder)


@pytest.mark.parametrize(("name", "words"), [
    ("tiny-llama", "is a built-in model"),
    ("smollm2-135m", "is a built-in model"),
    ("model.gguf", "is a GGUF file"),
    ("facebook/opt-125m", "is not a folder"),
])
def test_sources_that_are_not_checkpoint_folders(name: str, words: str) -> None:
    with pytest.raises(ToolkitError, match=f"{NEEDS}.*{words}"):
        open_streamed(name)


def test_folder_of_pickles_and_a_file_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(ToolkitError, match="only pickle weights"):
        open_streamed(tmp_path)
    with pytest.raises(ToolkitError, match=f"{NEEDS}.*is a file"):
        open_streamed(tmp_path / "pytorch_model.bin")


def test_bad_dtype(tied: Path) -> None:
    with pytest.raises(ToolkitError, match="unknown --dtype 'fp8'"):
        open_streamed(tied, dtype="fp8")


@pytest.mark.parametrize("holding", ["config.json", "model.safetensors", "notes.txt"])
def test_writer_refuses_a_used_folder(tmp_path: Path, holding: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / holding).write_text("{}")
    with pytest.raises(ToolkitError, match=r"cannot stream into .*(already holds a checkpoint|not empty)"):
        ShardWriter(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert [p.name for p in out.iterdir()] == [holding]


def test_writer_refuses_a_leftover_partial(tmp_path: Path) -> None:
    (tmp_path / "out.partial").mkdir()
    with pytest.raises(ToolkitError, match=r"out\.partial' exists"):
        ShardWriter(tmp_path / "out")


def test_writer_round_trip_loads_everywhere(sharded: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    streamed = open_streamed(sharded)
    writer = ShardWriter(tmp_path / "out")
    writer.write_rest(streamed.rest_tensors())
    for index, layer in enumerate(streamed.layers):
        streamed.load_layer(index, layer)
        writer.write_layer(index, streamed.layer_tensors(index, layer))
        streamed.release_layer(index, layer)
    assert (tmp_path / "out.partial").is_dir() and not (tmp_path / "out").exists()
    out = writer.finish(streamed.loaded.model.config, streamed.loaded.codec, copy_from=sharded)
    assert not (tmp_path / "out.partial").exists()
    names = {p.name for p in out.iterdir()}
    assert {REST_SHARD, layer_shard(0), layer_shard(1), SAFETENSORS_INDEX, "config.json", BYTES_MARKER} <= names
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    reference = load_model(str(sharded)).model.state_dict()
    for model in (load_model(str(out)).model, AutoModelForCausalLM.from_pretrained(out)):
        state = model.state_dict()
        for key, value in reference.items():
            assert state[key].dtype == value.dtype and torch.equal(state[key], value), key


def test_writer_abort_removes_the_partial(tied: Path, tmp_path: Path) -> None:
    streamed = open_streamed(tied)
    writer = ShardWriter(tmp_path / "out")
    writer.write_rest(streamed.rest_tensors())
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_modules_the_class_keeps_in_float32(sharded: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import LlamaModel

    monkeypatch.setattr(LlamaModel, "_keep_in_fp32_modules_strict", ["norm"], raising=False)
    reference = load_model(str(sharded)).model.state_dict()  # from_pretrained holds the norms in float32
    streamed = open_streamed(sharded)
    for index, layer in enumerate(streamed.layers):
        streamed.load_layer(index, layer)
    state = streamed.loaded.model.state_dict()
    assert state["model.norm.weight"].dtype is torch.float32
    assert {k: v.dtype for k, v in state.items()} == {k: v.dtype for k, v in reference.items()}


def test_unknown_architecture(tied: Path, tmp_path: Path) -> None:
    folder = _copy(tied, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "no-such-model"}))
    with pytest.raises(ToolkitError, match=r"could not build the model of .*streaming needs a causal language model"):
        open_streamed(folder)
