"""A grid given without a group (``int4``): the group a run fits to the model's widths, and what it records."""

from __future__ import annotations

import pytest

from toolkit.spec.compression import Compression, QuantSpec, parse_compression, parse_quant

SMOLLM2 = (576, 1536)  # SmolLM2-135M: hidden and MLP widths (the inputs of its decoder linears)
LLAMA_7B = (4096, 11008)
TINY = (64, 128)  # tests' tiny models: rows narrower than a group are one group


def test_a_spec_without_a_group_is_marked_and_keeps_its_label() -> None:
    auto, given = parse_quant("int4"), parse_quant("int4:g128")
    assert auto is not None and given is not None
    assert auto.auto_group and not given.auto_group
    assert auto.label == given.label == "int4:g128"  # stable until a run fits it
    assert (auto.asked, given.asked) == ("int4", "int4:g128")
    assert parse_quant("int4:sym").asked == "int4:sym"  # type: ignore[union-attr]
    assert parse_quant("int3:g64:sym") == QuantSpec(3, 64, symmetric=True)  # a given group: as before
    assert parse_compression("2:4", "int4").label == "2:4+int4:g128"


@pytest.mark.parametrize(("widths", "group"), [(SMOLLM2, 64), (LLAMA_7B, 128), (TINY, 128), ((960, 2560), 64),
                                               ((160, 288), 32)])
def test_the_group_is_the_default_or_the_first_half_that_divides_every_width(widths: tuple[int, ...],
                                                                           group: int) -> None:
    fitted = parse_quant("int4").fit_group(widths)  # type: ignore[union-attr]
    assert fitted.group_size == group and fitted.auto_group
    assert all(w % group == 0 or w <= group for w in widths)
    assert fitted.fit_group(widths) == fitted  # fitting again changes nothing


def test_a_given_group_and_per_row_groups_are_never_changed() -> None:
    for text in ("int4:g128", "int4:g0", "int8:g48:sym"):
        spec = parse_quant(text)
        assert spec is not None and spec.fit_group(SMOLLM2) is spec


def test_the_note_names_the_choice_and_the_widths_128_does_not_divide() -> None:
    auto = parse_quant("int4")
    assert auto is not None
    fitted = auto.fit_group(SMOLLM2)
    note = auto.fit_note(fitted, SMOLLM2)
    assert note.startswith("int4: group 64 chosen, 128 does not divide the 576-wide inputs")
    assert "int4:g128" in note and "1536" not in note  # 1536 is a multiple of 128
    assert auto.fit_note(auto.fit_group(LLAMA_7B), LLAMA_7B) == ""
    sym = parse_quant("int3:sym")
    assert sym is not None and "give int3:g128:sym" in sym.fit_note(sym.fit_group(SMOLLM2), SMOLLM2)


def test_the_stored_form_of_a_given_group_is_unchanged_and_a_fitted_one_round_trips() -> None:
    given = Compression(quant=QuantSpec(4, 128))
    assert given.to_dict()["quant"] == {"label": "int4:g128", "bits": 4, "group_size": 128, "symmetric": False}
    assert Compression.from_dict(given.to_dict()) == given
    fitted = Compression(quant=parse_quant("int4").fit_group(SMOLLM2))  # type: ignore[union-attr]
    data = fitted.to_dict()
    assert data["label"] == "int4:g64" and data["quant"]["auto_group"] is True
    assert Compression.from_dict(data) == fitted


def test_widths_without_a_group_of_32_or_more_get_one_group_per_row() -> None:
    from toolkit.spec.compression import parse_quant

    spec = parse_quant("int4")
    widths = [576, 1010, 1013, 1106, 1125]  # a shrunk model's per-layer widths: no power of two ≥ 32 divides them
    fitted = spec.fit_group(widths)
    assert fitted.group_size == 0
    note = spec.fit_note(fitted, widths)
    assert "one group per row (g0)" in note and "the inputs of 5 widths (576, 1010, 1013, 1106, …)" in note
    assert "the 576, 1010-wide inputs" in spec.fit_note(fitted, [576, 1010])
