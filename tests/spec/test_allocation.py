"""Allocation specs: parsing, ratio files checked against the model, OWL's ratios meet the total exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.errors import ToolkitError
from toolkit.spec.allocation import (
    FILE,
    OWL,
    UNIFORM,
    check_ratios,
    owl_ratios,
    parse_allocation,
    weighted_mean,
)
from toolkit.spec.refine import parse_refine


def test_parse_uniform_owl_and_defaults() -> None:
    assert parse_allocation(None).kind == UNIFORM
    assert parse_allocation("uniform").uniform
    owl = parse_allocation("owl")
    assert (owl.kind, owl.outlier_threshold, owl.lam, owl.label) == (OWL, 5.0, 0.08, "owl:5,0.08")
    custom = parse_allocation("owl:7,0.1")
    assert (custom.outlier_threshold, custom.lam) == (7.0, 0.1)


@pytest.mark.parametrize(("text", "words"), [
    ("owl:5", "two numbers"), ("owl:x,0.1", "two numbers"), ("owl:0,0.1", "M must be > 0"),
    ("owl:5,0.6", "λ must be in"), ("triangle", "unknown --allocation"),
    ("missing.json", "does not exist"),
])
def test_bad_allocation_text_is_one_line(text: str, words: str) -> None:
    with pytest.raises(ToolkitError, match=words):
        parse_allocation(text)


def test_file_is_read_and_malformed_files_are_named(tmp_path: Path) -> None:
    good = tmp_path / "ratios.json"
    good.write_text(json.dumps({"layers": [0.6, 0.8]}))
    spec = parse_allocation(str(good))
    assert (spec.kind, spec.ratios) == (FILE, (0.6, 0.8))
    bare = tmp_path / "bare.json"
    bare.write_text("[0.5, 0.5, 0.5]")
    assert parse_allocation(str(bare)).ratios == (0.5, 0.5, 0.5)
    for name, text, words in [("broken.json", "{", "not readable JSON"), ("empty.json", "{}", "needs"),
                              ("text.json", '{"layers": ["a"]}', "layer 0's ratio 'a' is not a number")]:
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ToolkitError, match=words):
            parse_allocation(str(path))


def test_check_ratios_names_count_range_and_total_difference() -> None:
    sizes = [100, 100, 200]
    check_ratios([0.6, 0.8, 0.7], sizes, 0.7, "f")  # (60 + 80 + 140) / 400 = 0.7
    with pytest.raises(ToolkitError, match="has 2 layer ratios; the model has 3"):
        check_ratios([0.7, 0.7], sizes, 0.7, "f")
    with pytest.raises(ToolkitError, match="layer 1's ratio 1 is outside"):
        check_ratios([0.4, 1.0, 0.7], sizes, 0.7, "f")
    with pytest.raises(ToolkitError, match=r"differ by \+0\.0500"):
        check_ratios([0.75, 0.75, 0.75], sizes, 0.7, "f")


@pytest.mark.parametrize("sizes", [[10, 10, 10, 10], [10, 30, 20, 40]])
def test_owl_ratios_meet_the_total_exactly_and_favour_outlier_layers(sizes: list[int]) -> None:
    lods = [0.01, 0.04, 0.02, 0.03]
    ratios = owl_ratios(lods, sizes, 0.7, 0.08)
    assert weighted_mean(ratios, sizes) == pytest.approx(0.7, abs=1e-12)
    order = sorted(range(4), key=lambda i: lods[i])
    assert [ratios[i] for i in order] == sorted(ratios, reverse=True)  # more outliers → less sparsity
    assert max(ratios) - min(ratios) == pytest.approx(2 * 0.08)


def test_owl_equal_outliers_is_uniform_and_too_wide_a_band_is_refused() -> None:
    assert owl_ratios([0.02, 0.02], [5, 5], 0.6, 0.1) == [0.6, 0.6]
    with pytest.raises(ToolkitError, match="lower λ"):
        owl_ratios([0.0, 1.0], [1, 1], 0.9, 0.4)


def test_parse_refine() -> None:
    assert parse_refine(None) is None and parse_refine("none") is None
    assert parse_refine("dsnot").cycles == 50
    spec = parse_refine("dsnot:20,0.01")
    assert spec is not None and (spec.cycles, spec.threshold, spec.label) == (20, 0.01, "dsnot:20,0.01")
    assert spec.applies_to("self_attn.q_proj") and not spec.applies_to("mlp.down_proj")
    every = parse_refine("dsnot:20,0,all")
    assert every is not None and every.applies_to("mlp.down_proj") and every.label == "dsnot:20,0,all"
    for bad in ("dsnot:0", "dsnot:x", "dsnot:5,-1", "ria", "dsnot:5,0,mlp", "dsnot:5,0,all,1"):
        with pytest.raises(ToolkitError):
            parse_refine(bad)


@pytest.mark.parametrize(("text", "words"), [
    ("owl:inf,0.1", "must be finite"), ("owl:nan,0.1", "must be finite"), ("owl:5,nan", "must be finite"),
    ("owl:5,inf", "must be finite"), ("owl:-3,0.1", "M must be > 0"), ("owl:5,-0.1", "λ must be in"),
    ("owl:5,1", "λ must be in"), ("owl:5,1.5", "λ must be in"),
])
def test_owl_parameters_are_finite_and_in_range(text: str, words: str) -> None:
    with pytest.raises(ToolkitError, match=words) as caught:
        parse_allocation(text)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("content", "words"), [
    ('{"layers": [0.5, 1.0]}', "layer 1's ratio 1 is outside \\[0, 1\\)"),
    ('{"layers": [-0.1, 0.5]}', "layer 0's ratio -0.1 is outside \\[0, 1\\)"),
    ('{"layers": [NaN, 0.5]}', "layer 0's ratio nan is not a finite number"),
    ('{"layers": [0.5, Infinity]}', "layer 1's ratio inf is not a finite number"),
    ('[0.5, -Infinity]', "layer 1's ratio -inf is not a finite number"),
    ('{"layers": []}', "needs"), ('{"layers": [true]}', "is not a number"),
])
def test_a_ratio_file_is_checked_when_it_is_read(content: str, words: str, tmp_path: Path) -> None:
    path = tmp_path / "ratios.json"
    path.write_text(content)
    with pytest.raises(ToolkitError, match=words):
        parse_allocation(str(path))


def test_a_folder_named_json_is_a_folder_not_a_missing_file(tmp_path: Path) -> None:
    (tmp_path / "x.json").mkdir()
    with pytest.raises(ToolkitError, match="is a folder, not a file"):
        parse_allocation(str(tmp_path / "x.json"))


def test_a_ratio_file_is_recorded_by_its_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "r.json").write_text("[0.5, 0.5]")
    monkeypatch.chdir(tmp_path)
    spec = parse_allocation("r.json")
    assert spec.path == str(tmp_path / "r.json") and spec.label == str(tmp_path / "r.json")
