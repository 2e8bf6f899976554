"""`visible`: text from outside (a model, a stored record, an exception) safe to print.

Every control or invisible character becomes an escape, so that nothing printed can move the
cursor, rewrite a line, hide text or reorder it; `json_visible` does the same inside JSON.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

__all__ = ["hidden_character", "json_visible", "visible"]

_SHORT: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_SUSPECT: Final = re.compile(r"[^\x20-\x7e]")
_HIDDEN: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Controls (C0, DEL, C1), format characters (bidi controls, zero-width characters, BOM,
tags), surrogates, and the line and paragraph separators."""


def _hidden(char: str) -> bool:
    return ord(char) < 0xA0 or unicodedata.category(char) in _HIDDEN


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if not _hidden(char):
        return char
    code = ord(char)
    if char in _SHORT:
        return _SHORT[char]
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: object) -> str:
    """`str(text)` with every control or invisible character written as an escape.

    C0 controls (newline and tab included), DEL, C1 controls, bidi controls, zero-width
    characters and other format characters become `\\n`, `\\r`, `\\t`, `\\x1b`, `\\x9b`,
    `\\u202e` and so on; everything else, other scripts and emoji included, is kept.
    """
    return _SUSPECT.sub(_escape, str(text))


def _json_escape(match: re.Match[str]) -> str:
    char = match.group()
    if not _hidden(char):
        return char
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def json_visible(text: str) -> str:
    """JSON `text` with the characters `visible` escapes written as `\\uXXXX` (same value).

    JSON already escapes C0 controls; DEL, C1 controls and invisible characters can only
    occur inside its strings, where `\\uXXXX` means the same character.
    """
    return re.sub(r"[^\x00-\x7e]", _json_escape, text)


def hidden_character(text: str) -> str | None:
    """The first character of `text` that `visible` would escape, or `None`."""
    for match in _SUSPECT.finditer(text):
        if _hidden(match.group()):
            return match.group()
    return None
