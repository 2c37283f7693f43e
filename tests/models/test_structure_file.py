"""The per-layer structure file is checked field by field before any weight loads: one line naming the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.models.test_stream import save_tiny
from toolkit.cli.main import main
from toolkit.errors import ToolkitError
from toolkit.models.load import load_model
from toolkit.models.shrunk import layer_shapes
from toolkit.models.sources import check_model_source
from toolkit.models.structure_file import MARKER, layer_weights, read_structure

GOOD_HEAD = {"format": "prunelab-shrunk/2", "model_type": "llama"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("src") / "llama", "llama", "float32")


def _with_structure(folder: Path, tmp_path: Path, record: object) -> Path:
    copy = tmp_path / "model"
    shutil.copytree(folder, copy)
    (copy / MARKER).write_text(json.dumps(record))
    return copy


def test_a_saved_record_reads_back_with_its_sizes(folder: Path, tmp_path: Path) -> None:
    shapes = layer_shapes(load_model("tiny-llama").model)
    record = read_structure(_with_structure(folder, tmp_path, {**GOOD_HEAD, "layers": shapes}))
    assert layer_weights(record) == [2 * 64 * 64 + 2 * 32 * 64 + 3 * 64 * 128] * 2  # q, o; k, v; gate, up, down


@pytest.mark.parametrize(("layers", "words"), [
    ("ab", "\"layers\" must be a non-empty list with one object per decoder layer, got the string 'ab'"),
    ("abc", "\"layers\" must be a non-empty list with one object per decoder layer, got the string 'abc'"),
    ([], "\"layers\" must be a non-empty list"),
    (["a", "b"], "layers\\[0\\] must be an object with \"modules\""),
    ([{"modules": "q"}], "layers\\[0\\].modules must be an object of linears"),
    ([{"modules": {"q": {"in": "64", "out": 64, "bias": False}}}], "layers\\[0\\].modules.q.in must be a whole number"),
    ([{"modules": {"q": {"in": 64, "out": 64, "bias": 0}}}], "layers\\[0\\].modules.q.bias must be true or false"),
    ([{"modules": {"q": {"in": 64, "out": 64, "bias": False}}, "attn": {"num_key_value_groups": "2"}}],
     "layers\\[0\\].attn.num_key_value_groups must be a whole number"),
    ([{"modules": {"q": {"in": 64, "out": 64, "bias": False}}}] * 3, "lists 3 decoder layers, config.json says 2"),
])
def test_a_bad_structure_file_is_one_line_naming_the_field(layers: object, words: str, folder: Path,
                                                           tmp_path: Path) -> None:
    model = _with_structure(folder, tmp_path, {**GOOD_HEAD, "layers": layers})
    with pytest.raises(ToolkitError, match=words) as caught:
        check_model_source(str(model))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("record", "words"), [
    ([1, 2], "must hold a JSON object"), ({"format": "x"}, "unknown format 'x'"),
    ({"format": "prunelab-shrunk/2", "model_type": 3, "layers": []}, "\"model_type\" must be a string"),
])
def test_a_foreign_structure_file_is_named(record: object, words: str, folder: Path, tmp_path: Path) -> None:
    with pytest.raises(ToolkitError, match=words):
        read_structure(_with_structure(folder, tmp_path, record))


def test_prune_refuses_it_before_loading_and_leaves_no_run(folder: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    model = _with_structure(folder, tmp_path, {**GOOD_HEAD, "layers": "ab"})
    store = tmp_path / "runs"
    assert main(["prune", "--model", str(model), "--out", str(store), "--eval", "none"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\"layers\" must be a non-empty list" in err and "Error" not in err
    assert not store.exists()
