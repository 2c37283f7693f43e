"""Text from a run folder is shown, never obeyed: on a terminal and in the app's markdown."""

from __future__ import annotations

import pytest

from toolkit.store.safe_text import code, markdown, terminal


@pytest.mark.parametrize(("raw", "shown"), [
    ("plain 50% · ü", "plain 50% · ü"),
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
    ("a\rb\nc\td", "a\\rb\\nc\\td"),
    ("\x9b2J\x7f", "\\x9b2J\\x7f"),  # C1 CSI and DEL
    ("evil\u202etxt", "evil\\u202etxt"),  # a bidirectional override
    ("bytes\udcff", "bytes\\udcff"),  # a non-UTF-8 folder name as Python decodes it
    ("back\\x1b", "back\\\\x1b"),  # a typed backslash cannot forge an escape
])
def test_terminal_escapes_control_characters(raw: str, shown: str) -> None:
    assert terminal(raw) == shown
    assert all(ch.isprintable() or ch == " " for ch in terminal(raw))


def test_markdown_shows_what_was_typed() -> None:
    assert markdown("a_b *x* [l](u) <img src=x> `c` &amp; ~~s~~ |t| $m$") == (
        "a\\_b \\*x\\* \\[l\\](u) \\<img src=x\\> \\`c\\` \\&amp; \\~\\~s\\~\\~ \\|t\\| \\$m\\$")
    assert "\n" not in markdown("# title\n- item") and markdown("x\x1b[2J").startswith("x\\\\x1b\\[2J")


def test_code_spans_only_plain_ids() -> None:
    assert code("20261127-015754-wanda-50-b984") == "`20261127-015754-wanda-50-b984`"
    assert code("run`<b>x</b>`") == "run\\`\\<b\\>x\\</b\\>\\`"
