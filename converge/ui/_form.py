"""Reading a posted form, bounded: at most 64 KiB, 1,000 fields, each field once.

Anything else is a `FormError` whose one-line message the console answers with status 400.
"""

from __future__ import annotations

from typing import Final, final
from urllib.parse import parse_qsl

from starlette.requests import Request

__all__ = ["MAX_FORM_BYTES", "MAX_FORM_FIELDS", "FormError", "read_form"]

MAX_FORM_BYTES: Final = 64 * 1024
MAX_FORM_FIELDS: Final = 1000
_FORM: Final = "application/x-www-form-urlencoded"


@final
class FormError(Exception):
    """A posted body that is not a form the console reads; says what was wrong, in one line."""


async def read_form(request: Request) -> dict[str, str]:
    """The urlencoded form posted with `request`.

    Raises:
        FormError: It is not a urlencoded form, is larger than 64 KiB, has more than 1,000
            fields or a field twice, or is not UTF-8.
    """
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != _FORM:
        raise FormError(f"expected a form ({_FORM}), got {kind or 'no content type'}")
    too_big = f"the form is larger than {MAX_FORM_BYTES // 1024} KiB"
    declared = request.headers.get("content-length", "")
    if declared.isdecimal() and int(declared) > MAX_FORM_BYTES:
        raise FormError(too_big)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormError(too_big)
    if body.count(b"&") >= MAX_FORM_FIELDS:
        raise FormError(f"the form has more than {MAX_FORM_FIELDS} fields")
    try:
        text = bytes(body).decode("utf-8")
        pairs = parse_qsl(text, keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise FormError("the form is not UTF-8 text") from None
    form: dict[str, str] = {}
    for name, value in pairs:
        if name in form:
            raise FormError(f"the form gives field {_shown(name)} twice")
        form[name] = value
    return form


def _shown(name: str) -> str:
    """A field name for the message: short, and without control characters."""
    cut = name[:60] + ("..." if len(name) > 60 else "")
    return repr("".join(ch if ch.isprintable() else "?" for ch in cut))
