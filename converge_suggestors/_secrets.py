"""`Scrubber`: every form a provider's credentials take on the wire, found and replaced.

A provider sends its secrets in several forms: the API key as `Authorization: Bearer KEY`,
the user name and password of the base URL as `Authorization: Basic base64(user:pw)`, and the
base URL's query parameters in the request's path. A server may echo any of them back, raw,
percent-encoded, JSON-escaped or in base64 (inside a longer base64 text too, at any
alignment). A `Scrubber` knows every such form of every secret, so each text that leaves the
provider (an error, a log line, an excerpt of a reply) is scrubbed whole before it is cut.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Final, final
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit

__all__ = ["MASK", "MIN_SECRET_LENGTH", "NOT_SECRET_PARAMETERS", "Scrubber", "guard_logs"]

MASK: Final = "***"
"""What a secret is replaced with."""
MIN_SECRET_LENGTH: Final = 8
"""A key, user name, password or query value shorter than this is too short to tell from
ordinary words: only its forms with context (`Bearer KEY`, `user:pw`, `name=value`, the Basic
token) are scrubbed, not the bare value."""
NOT_SECRET_PARAMETERS: Final = frozenset({"api-version"})
"""Query parameters of a base URL that are no secret (Azure's `api-version`)."""
_ANCHOR: Final = 4
"""Shortest anchor (a form's longest run of letters and digits) searched for on its own."""
_NESTING: Final = 3
"""How many JSON strings inside one another a secret's forms are looked for in."""
_FRAGMENT: Final = 6
"""Shortest base64 fragment of a secret inside a longer base64 text that is looked for."""
_LOGGERS: Final = (
    "httpx",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
)
"""The loggers of the HTTP client, which print the URL it posts to and the reply's headers."""


@final
class Scrubber:
    """Finds the secrets of one provider in a text, in every form, and masks them.

    Args:
        secrets: `(label, text)` for each secret: what it is (`"the API key"`), and its text.
    """

    __slots__ = ("__weakref__", "_anchors", "_labels", "_pattern", "_reach", "_weak", "forms")

    def __init__(self, secrets: Iterable[tuple[str, str]]) -> None:
        labels: dict[str, str] = {}
        for label, text in secrets:
            if text:
                for form in _forms(text):
                    labels.setdefault(form, label)
        self._labels = labels
        self.forms: tuple[str, ...] = tuple(sorted(labels, key=lambda form: (-len(form), form)))
        """Every form looked for, longest first."""
        self._pattern = _union(self.forms)
        # Every form holds an anchor (its longest run of letters and digits): a text in which
        # no anchor occurs holds no form, and the forms are looked for only around the anchors
        # found (a few substring searches, where one pattern of hundreds of forms would try
        # each of them at every character). Forms whose anchor is too short to be rare are
        # looked for everywhere, on their own.
        anchors = {form: _anchor(form) for form in self.forms}
        self._anchors = tuple(sorted({a for a in anchors.values() if len(a) >= _ANCHOR}))
        self._weak = _union([form for form, a in anchors.items() if len(a) < _ANCHOR])
        self._reach = len(self.forms[0]) if self.forms else 0

    @classmethod
    def of(cls, base_url: str, api_key: str | None) -> Scrubber:
        """The secrets of a provider posting to `base_url` with `api_key`: the key, the URL's
        user name and password, and its query parameters' values (but `api-version`)."""
        secrets: list[tuple[str, str]] = []
        if api_key:
            secrets.append(("the API key", api_key if _strong(api_key) else f"Bearer {api_key}"))
        parts = urlsplit(base_url)
        userinfo, at, _ = parts.netloc.rpartition("@")
        if at and userinfo:
            label = "the URL's credentials"
            user, _, password = userinfo.partition(":")
            secrets += [(label, userinfo), (label, f"{unquote(user)}:{unquote(password)}")]
            secrets += [
                (label, part)
                for part in {user, password, unquote(user), unquote(password)}
                if _strong(unquote(part))
            ]
        for raw in filter(None, parts.query.split("&")):
            for name, value in parse_qsl(raw, keep_blank_values=True):
                if name.lower() in NOT_SECRET_PARAMETERS or not value:
                    continue
                label = f"the URL's query parameter {name!r}"
                secrets += [(label, raw), (label, f"{name}={value}")]
                if _strong(value):
                    secrets += [(label, value), (label, raw.partition("=")[2])]
        return cls(secrets)

    def __repr__(self) -> str:
        return f"Scrubber({len(self.forms)} forms)"

    def __bool__(self) -> bool:
        return self._pattern is not None

    def scrub(self, text: str) -> str:
        """`text` with every form of every secret replaced by `***`."""
        pattern = self._pattern
        if pattern is None:
            return text
        parts: list[str] = []
        done = 0
        for start, end in self._spans(text):
            for found in pattern.finditer(text, start, end):
                if found.start() >= done:
                    parts += [text[done : found.start()], MASK]
                    done = found.end()
        if not parts:
            return text
        parts.append(text[done:])
        return "".join(parts)

    def find(self, text: str) -> str | None:
        """What secret `text` holds (`"the API key"`, ...), in any form, or `None`."""
        pattern = self._pattern
        if pattern is None:
            return None
        for start, end in self._spans(text):
            found = pattern.search(text, start, end)
            if found is not None:
                return self._labels[found.group()]
        return None

    def showable(self, text: str, start: int, *, final: bool) -> int | None:
        """How much of `text`, a text growing at its end whose first `start` characters
        were shown, may be shown now: `None` once it holds a secret; else its length, or
        (unless `final`) less what at its end begins a secret's form.

        Only the text from `start`, and the form's length before it, is searched: what was
        shown held no secret and ended in no start of one.
        """
        if self._pattern is None:
            return len(text)
        if self.find(text[max(start - self._reach, 0) :]) is not None:
            return None
        if final:
            return len(text)
        tail = text[-self._reach :]
        return max(len(text) - self._partial(tail), start)

    def _spans(self, text: str) -> list[tuple[int, int]]:
        """The stretches of `text` that may hold a form: around each anchor found, merged."""
        points: list[int] = []
        for anchor in self._anchors:
            at = text.find(anchor)
            while at >= 0:
                points.append(at)
                at = text.find(anchor, at + 1)
        if self._weak is not None:
            points += [found.start() for found in self._weak.finditer(text)]
        if not points:
            return []
        reach = self._reach
        spans: list[tuple[int, int]] = []
        for point in sorted(points):
            start, end = max(point - reach, 0), point + reach
            if spans and start <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
            else:
                spans.append((start, end))
        return spans

    def excerpt(self, text: str, limit: int, *, truncated: bool = False) -> str:
        """`text` scrubbed whole, then cut to `limit` characters (with `…`).

        `truncated` says `text` is the start of a longer text (a body read up to a cap): a
        secret may then be cut at its end, so whatever ends it that begins a secret's form
        goes too.
        """
        clean = self.scrub(text)
        if truncated:
            clean = clean[: len(clean) - self._partial(clean)]
        return clean if len(clean) <= limit else clean[: limit - 1] + "…"

    def _partial(self, text: str) -> int:
        """How many characters at the end of `text` begin some secret's form."""
        longest = 0
        for form in self.forms:
            for size in range(min(len(form) - 1, len(text)), longest, -1):
                if text.endswith(form[:size]):
                    longest = size
                    break
        return longest


def guard_logs(scrubber: Scrubber) -> None:
    """Scrub what the HTTP client logs (its URL, the reply's headers) with `scrubber` too,
    for as long as `scrubber` lives."""
    if not scrubber:
        return
    with _LIVE_LOCK:
        _LIVE.add(scrubber)
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


_LIVE: Final[weakref.WeakSet[Scrubber]] = weakref.WeakSet()
_LIVE_LOCK: Final = threading.Lock()


@final
class _LogScrubber(logging.Filter):
    """Rewrites a log record's message with every live scrubber; drops nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        with _LIVE_LOCK:  # a provider made in another thread meanwhile
            scrubbers = list(_LIVE)
        if not scrubbers:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot be formatted: the handler will say so
            return True
        clean = message
        for scrubber in scrubbers:
            clean = scrubber.scrub(clean)
        if clean != message:
            record.msg, record.args = clean, ()
        return True


_FILTER: Final = _LogScrubber()


def _strong(text: str) -> bool:
    return len(text) >= MIN_SECRET_LENGTH


def _forms(secret: str) -> set[str]:
    """`secret` as it may be echoed: raw, percent-encoded, JSON- and bytes-escaped, base64.

    Its base64 is looked for whole, and (for a secret long enough) as the part of it that any
    text around it leaves unchanged, at each of the three alignments: a secret inside a longer
    base64 text.
    """
    forms = {secret, quote(secret, safe=""), quote(secret), quote_plus(secret)}
    forms |= {_lower_hex(form) for form in forms}
    forms |= {repr(secret)[1:-1], repr(secret.encode())[2:-1]}
    for _ in range(_NESTING):  # an escaped form inside JSON is escaped again
        forms |= {escaped for form in forms for escaped in _json_escaped(form)}
    data = secret.encode()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(data).decode()
        forms |= {whole, whole.rstrip("=")}
        if _strong(secret):
            for offset in range(3):
                text = encode(bytes(offset) + data).decode()
                first, last = -(-8 * offset // 6), 8 * (offset + len(data)) // 6
                if last - first >= _FRAGMENT:
                    forms.add(text[first:last])
    return {form for form in forms if form}


def _union(forms: Sequence[str]) -> re.Pattern[str] | None:
    """One pattern matching any of `forms`, the longest first; `None` for none."""
    ordered = sorted(forms, key=lambda form: (-len(form), form))
    return re.compile("|".join(map(re.escape, ordered))) if ordered else None


def _anchor(form: str) -> str:
    return max(_LETTERS_AND_DIGITS.findall(form), key=len, default="")


_LETTERS_AND_DIGITS: Final = re.compile(r"[A-Za-z0-9]+")


def _json_escaped(text: str) -> tuple[str, ...]:
    """`text` inside a JSON string: with non-ASCII escaped or kept, `/` as it is or as `\\/`."""
    escaped = json.dumps(text)[1:-1]
    kept = json.dumps(text, ensure_ascii=False)[1:-1]
    return escaped, kept, escaped.replace("/", "\\/"), kept.replace("/", "\\/")


def _lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda match: match.group().lower(), text)
