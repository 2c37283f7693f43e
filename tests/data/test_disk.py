"""A folder written by ``datasets.save_to_disk`` as calibration and evaluation text (offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.cli.main import main
from toolkit.data.text import check_text_source, load_text
from toolkit.errors import ToolkitError

TRAIN = [f"The river number {i} flows north past the old mill and the stone bridge." for i in range(120)]
TEST = [f"A quiet valley holds lake {i}, where herons wait in the reeds at dawn." for i in range(120)]


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    import datasets

    folder = tmp_path / "corpus"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": TRAIN}),
                          "validation": datasets.Dataset.from_dict({"text": TEST})}).save_to_disk(str(folder))
    return folder


def test_dataset_dict_folder_gives_train_and_validation(saved: Path) -> None:
    assert load_text(str(saved), "train") == "\n\n".join(TRAIN)
    assert load_text(str(saved), "test") == "\n\n".join(TEST)  # no "test" split: validation is used
    check_text_source(str(saved))


def test_single_dataset_folder_is_both_splits(tmp_path: Path) -> None:
    import datasets

    datasets.Dataset.from_dict({"text": ["one", "", "two"], "id": [1, 2, 3]}).save_to_disk(str(tmp_path / "d"))
    assert load_text(str(tmp_path / "d"), "train") == load_text(str(tmp_path / "d"), "test") == "one\n\ntwo"


def test_wrong_column_or_split_is_one_clear_error(tmp_path: Path) -> None:
    import datasets

    datasets.Dataset.from_dict({"sentence": ["a"]}).save_to_disk(str(tmp_path / "col"))
    with pytest.raises(ToolkitError, match=r"has columns sentence; it needs a string column named 'text'"):
        load_text(str(tmp_path / "col"), "train")
    datasets.DatasetDict({"test": datasets.Dataset.from_dict({"text": ["a"]})}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ToolkitError, match="has splits test; the train text needs a split named train"):
        load_text(str(tmp_path / "dd"), "train")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ToolkitError, match="not a text file or a save_to_disk dataset"):
        check_text_source(str(tmp_path / "plain"))


def test_hub_name_offline_error_names_the_local_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ToolkitError, match=r"could not fetch 'wikitext2'.*'wiki', a local text file or a folder"):
        load_text("wikitext2", "test")


def test_prune_calibrates_and_evaluates_on_a_saved_dataset(saved: Path, tmp_path: Path) -> None:
    code = main(["prune", "--model", "tiny-llama", "--method", "wanda", "--sparsity", "50%", "--calib", str(saved),
                 "--eval", str(saved), "--nsamples", "4", "--seqlen", "32", "--eval-seqlen", "32",
                 "--eval-windows", "2", "--out", str(tmp_path / "runs"), "--json", str(tmp_path / "r.json")])
    assert code == 0
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["protocol"]["calibration"]["source"] == str(saved)
    assert set(result["ppl"]) == {str(saved)} and result["ppl"][str(saved)] > 1
