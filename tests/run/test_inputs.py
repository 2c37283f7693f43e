"""Input files are checked before the model loads and before a run folder exists, in memory and with --stream."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import toolkit.run.inputs as inputs_module
import toolkit.run.pipeline as pipeline_module
from tests.models.test_stream import save_tiny
from toolkit.api import RunConfig, prune_model
from toolkit.engine.allocation import layer_sizes
from toolkit.errors import ToolkitError
from toolkit.models.layers import decoder_layers
from toolkit.models.load import load_model
from toolkit.models.shrunk import layer_shapes
from toolkit.models.structure_file import MARKER
from toolkit.run.inputs import LayerGeometry, layer_geometry

FAST: dict[str, Any] = dict(method="wanda", sparsity="50%", nsamples=2, seqlen=16, eval_data=None)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("src") / "llama", "llama", "float32")


def _ratios(tmp_path: Path, values: list[float]) -> str:
    path = tmp_path / "ratios.json"
    path.write_text(json.dumps({"layers": values}))
    return str(path)


def _never_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(pipeline_module, "load_model", refuse)
    monkeypatch.setattr(pipeline_module, "open_streamed", refuse)


@pytest.mark.parametrize("stream", [False, True], ids=["in-memory", "stream"])
@pytest.mark.parametrize(("values", "words"), [
    ([0.5, 0.5, 0.5], "has 3 layer ratios; the model has 2 decoder layers"),
    ([0.5], "has 1 layer ratios; the model has 2 decoder layers"),
    ([0.3, 0.5], "total sparsity of 0.4000"),
])
def test_a_ratio_file_that_does_not_fit_is_refused_before_loading_and_leaves_no_run(
        values: list[float], words: str, stream: bool, folder: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _never_loads(monkeypatch)
    store = tmp_path / "runs"
    config = RunConfig(model=str(folder) if stream else "tiny-llama", stream=stream, out_dir=str(store),
                       allocation=_ratios(tmp_path, values), **FAST)
    with pytest.raises(ToolkitError, match=words):
        prune_model(config)
    assert not store.exists() or not any(store.iterdir())  # no failed run in the store


def test_without_geometry_the_loaded_model_is_checked_before_the_run_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs_module, "layer_geometry", lambda model: None)  # as for a .gguf or a hub id
    store = tmp_path / "runs"
    config = RunConfig(model="tiny-llama", out_dir=str(store), allocation=_ratios(tmp_path, [0.5] * 3), **FAST)
    with pytest.raises(ToolkitError, match="has 3 layer ratios; the model has 2"):
        prune_model(config)
    assert not any(store.iterdir())


def test_a_fitting_ratio_file_runs(tmp_path: Path) -> None:
    result = prune_model(RunConfig(model="tiny-llama", out_dir=str(tmp_path), allocation=_ratios(tmp_path, [0.4, 0.6]),
                                   **FAST))
    assert result["allocation"]["ratios"] == [0.4, 0.6]


def test_geometry_is_read_from_the_files(folder: Path, tmp_path: Path) -> None:
    assert layer_geometry("tiny-llama") == LayerGeometry(2, (1, 1))
    assert layer_geometry("tiny-gemma3") == LayerGeometry(4, (1, 1, 1, 1))
    assert layer_geometry(str(folder)) == LayerGeometry(2, (1, 1))
    assert layer_geometry(str(tmp_path / "model.gguf")) is None
    assert layer_geometry("someone/model") is None
    differing = tmp_path / "differing"
    differing.mkdir()
    (differing / "config.json").write_text(json.dumps({"num_hidden_layers": 3, "intermediate_size": [8, 16, 8]}))
    assert layer_geometry(str(differing)) == LayerGeometry(3, None)  # the count only; sizes from the loaded model


def test_a_shrunk_folder_gives_each_layer_its_own_size(folder: Path, tmp_path: Path) -> None:
    model = load_model("tiny-llama").model
    shrunk = tmp_path / "shrunk"
    shrunk.mkdir()
    for name in ("config.json",):
        (shrunk / name).write_text((folder / name).read_text())
    shapes = layer_shapes(model)
    shapes[1]["modules"]["gate"]["out"] = 64  # as a block-scope run leaves it
    (shrunk / MARKER).write_text(json.dumps({"format": "prunelab-shrunk/2", "model_type": "llama", "layers": shapes}))
    sizes = layer_sizes(decoder_layers(model))
    assert layer_geometry(str(shrunk)) == LayerGeometry(2, (sizes[0], sizes[1] - 64 * 64))


@pytest.mark.parametrize("stream", [False, True], ids=["in-memory", "stream"])
def test_a_calibration_text_too_short_is_refused_before_loading(stream: bool, folder: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _never_loads(monkeypatch)
    calib = tmp_path / "calib.txt"
    calib.write_text("x" * 40)  # 40 byte tokens: 2 windows of 16 need at least 2 × 15
    store = tmp_path / "runs"
    config = RunConfig(model=str(folder) if stream else "tiny-llama", stream=stream, out_dir=str(store),
                       calib=str(calib), **{**FAST, "nsamples": 3})
    with pytest.raises(ToolkitError, match="the calibration text has 40 tokens, fewer than nsamples × seqlen = 3 × 16"):
        prune_model(config)
    assert not store.exists() or not any(store.iterdir())


def test_the_early_count_is_the_tokenizers_own(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from toolkit.models.sources import EMBEDDED, cache_dir
    from toolkit.models.tokenizers import HFCodec
    from toolkit.run.inputs import _token_count

    folder = cache_dir() / EMBEDDED
    if not (folder / "tokenizer.json").is_file():
        pytest.skip("the embedded model is not converted yet")
    text = "Pruning keeps the weights that matter.\n\nÜber naïve café — 2:4 sparsity, 50 % of weights! " * 20
    assert _token_count(EMBEDDED, text) == len(HFCodec(AutoTokenizer.from_pretrained(folder)).encode(text))
    assert _token_count("tiny-llama", "é") == 2 and _token_count("someone/model", text) is None
