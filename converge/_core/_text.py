"""Text from suggestors, models and humans, made storable where it enters a record.

A record must always serialise and read back, and two characters a Python `str` may hold do
not survive it: a lone surrogate (U+D800 to U+DFFF, which `json.loads('"\\ud800"')` gives
from a model's output), which UTF-8 cannot encode, and NUL, which PostgreSQL text refuses.

- Free text a record keeps (an exception's message and traceback, a refusal's, a violation's
  or a human's reason, a call's metadata) goes through `storable`: each such character is
  replaced by its escape (`\\ud800`, `\\x00`) and the text ends with
  ` [N unstorable character(s) escaped]`, so the change is recorded where the text is read.
  Text longer than `MAX_TEXT` characters is cut there and ends with
  `… [N characters, truncated]`.
- Identities (suggestor, invariant and pack names, run ids, a formation's name and location,
  who decided a gate) holding either are refused instead (`identity_problem`): a record is
  looked up and matched by them, and an escaped name would be another name. (What a name
  may hold beyond that, and how it is shown, is for the places that show it.)
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MAX_TEXT", "identity_problem", "storable", "utf8_size"]

MAX_TEXT: Final = 65_536
"""The most characters of free text a record keeps in one field; the rest is cut."""


_UNSTORABLE: Final = re.compile("[\x00\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    character = match.group()
    return "\\x00" if character == "\x00" else f"\\u{ord(character):04x}"


def storable(text: str, *, limit: int | None = MAX_TEXT) -> str:
    """`text` as a record can keep it: a plain `str`, lone surrogates and NUL escaped, at
    most `limit` characters (`None`: no limit), each change said at its end.

    Text that needs no change is returned as it is (the same object).
    """
    if type(text) is not str:  # a subclass: its plain text, none of its own methods
        text = str.__str__(text)
    length = len(text)
    cut = limit is not None and length > limit
    if cut:
        text = text[:limit]
    if not (text.isascii() and "\x00" not in text):
        text, count = _UNSTORABLE.subn(_escape, text)
        if count:
            text += f" [{count} unstorable character{'' if count == 1 else 's'} escaped]"
    if cut:
        text += f"… [{length} characters, truncated]"
    return text


def identity_problem(text: str) -> str | None:
    """Why `text` cannot name something in a record, or `None` when it can: it holds a lone
    surrogate or NUL (the answer names the first, and where)."""
    if text.isascii() and "\x00" not in text:
        return None
    bad = _UNSTORABLE.search(text)
    if bad is None:
        return None
    character = bad.group()
    what = "NUL" if character == "\x00" else "a lone surrogate"
    return (
        f"holds {what} (U+{ord(character):04X}) at position {bad.start()}: "
        "it cannot be stored as a name"
    )


_CHUNK: Final = 1 << 20


def utf8_size(text: str) -> int:
    """How many bytes `text` takes in UTF-8 (a lone surrogate counted as three), measured a
    mebibyte at a time: a long text is never copied whole to be measured."""
    if text.isascii():
        return len(text)
    length = len(text)
    if length <= _CHUNK:
        return len(text.encode("utf-8", "surrogatepass"))
    return sum(
        len(text[start : start + _CHUNK].encode("utf-8", "surrogatepass"))
        for start in range(0, length, _CHUNK)
    )
