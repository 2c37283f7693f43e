"""Text from a run folder made safe to show: on a terminal (:func:`terminal`) and in markdown (:func:`markdown`).

A run folder's name and its config values are whatever was on disk: an escape sequence in them would
reach the terminal raw (retitle the window, recolour or clear the screen, move the cursor) and a
markdown or HTML character would be rendered by the app. Every printer of store data passes such
text through one of these two functions first.
"""

from __future__ import annotations

import re
import unicodedata

_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")  # reorder text
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}
_PLAIN = re.compile(r"[\w.:+%=,/ -]*")  # letters, digits and the punctuation of run ids and labels
_MARKDOWN = re.compile(r"([\\`*_\[\]<>&~|$])")  # what renders mid-line (terminal() already made it one line)


def _escaped(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _unsafe(char: str) -> bool:
    return char in _NAMED or char in _BIDI or unicodedata.category(char) in ("Cc", "Cs")


def terminal(value: object) -> str:
    r"""``str(value)`` on one line with every control character written as a visible escape.

    C0 and C1 controls (ESC, CSI, BEL, ``\r``, ``\n``, ``\t``, DEL), lone surrogates (a folder name
    that is not UTF-8) and bidirectional overrides become ``\x1b``, ``\r``, ``\udcff``, ``\u202e``;
    a backslash becomes ``\\`` so the escapes cannot be forged. Everything else is kept.
    """
    text = str(value)
    if not any(_unsafe(char) for char in text):
        return text
    return "".join(_escaped(char) if _unsafe(char) else char for char in text)


def markdown(value: object) -> str:
    """:func:`terminal`, then every character that markdown or HTML renders mid-line backslash-escaped.

    The text is one line (no block syntax can start), and emphasis, code, links, images, tables,
    strike-through, maths, tags and entities show as typed, never rendered.
    """
    return _MARKDOWN.sub(r"\\\1", terminal(value))


def code(value: object) -> str:
    """A markdown code span of ``value`` (a run id) when it is plain; :func:`markdown` text otherwise.

    A backtick or a control character would end or break the span, so such text is shown escaped.
    """
    text = str(value)
    if _PLAIN.fullmatch(text):
        return f"`{text}`"
    return markdown(text)
