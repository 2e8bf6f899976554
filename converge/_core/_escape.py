"""Text from outside (a model, a stored record, an exception) made safe to show: the one
place for terminals, JSON and HTML.

Every control or invisible character becomes an escape, so that nothing shown can move the
cursor, rewrite a line, hide text or reorder it: `visible` for a terminal, `json_visible`
inside JSON, `esc` for a page (HTML's own characters escaped too, line breaks kept).
"""

from __future__ import annotations

import html as _html
import io
import re
import unicodedata
from typing import Final, TextIO, final

from pydantic import ValidationError

__all__ = [
    "VisibleLines",
    "error_text",
    "esc",
    "hidden_character",
    "json_visible",
    "visible",
]

_SHORT: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_SUSPECT: Final = re.compile(r"[^\x20-\x7e]")
_SUSPECT_IN_LINES: Final = re.compile(r"[^\x20-\x7e\n\t]")
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


def visible(text: object, *, lines: bool = False) -> str:
    """`str(text)` with every control or invisible character written as an escape.

    C0 controls (newline and tab included, unless `lines`), DEL, C1 controls, bidi controls,
    zero-width characters and other format characters become `\\n`, `\\r`, `\\t`,
    `\\x1b`, `\\x9b`, `\\u202e` and so on; everything else, other scripts and emoji
    included, is kept.
    """
    return (_SUSPECT_IN_LINES if lines else _SUSPECT).sub(_escape, str(text))


def esc(text: object) -> str:
    """`text` as HTML (or SVG) text or attribute value: `& < > " '` escaped, and control or
    invisible characters written as visible escapes (newline and tab kept)."""
    return _html.escape(visible(text, lines=True), quote=True)


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


def error_text(error: BaseException) -> str:
    """What `error` says, on one line: a pydantic `ValidationError` summarised, made visible."""
    if isinstance(error, ValidationError):
        count = error.error_count()
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        noun = "validation error" if count == 1 else "validation errors"
        return visible(f"{count} {noun}; first: {f'{where}: ' if where else ''}{first['msg']}")
    return visible(str(error).strip())


@final
class VisibleLines(io.StringIO):
    """A stream for one-line messages: each write goes to `target` made visible.

    A final newline is kept as the end of the line; any other is escaped.
    """

    def __init__(self, target: TextIO) -> None:
        super().__init__()
        self._target = target

    def write(self, s: str, /) -> int:
        body, end = (s[:-1], "\n") if s.endswith("\n") else (s, "")
        self._target.write(visible(body) + end)
        return len(s)
