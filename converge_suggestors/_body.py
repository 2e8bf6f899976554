"""`BoundedBody`: a reply's body, decompressed as it comes, never more than a cap.

It takes the body's bytes as they arrive on the wire, in any transport's chunks, and inflates
gzip or deflate itself, never more than the room left under the cap, so a small compressed
body that expands to gigabytes (a gzip bomb) costs the cap and no more.
"""

from __future__ import annotations

import zlib
from typing import Final, final

__all__ = ["BodyTooLarge", "BodyUnreadable", "BoundedBody"]

_GZIP: Final = 16 + zlib.MAX_WBITS
_ZLIB: Final = zlib.MAX_WBITS
_RAW: Final = -zlib.MAX_WBITS
_STEP: Final = 256 * 1024
"""Most bytes inflated at once (so memory holds the body and one step, not two bodies)."""


class BodyTooLarge(Exception):
    """The body, decompressed, is longer than the cap."""


class BodyUnreadable(Exception):
    """The body cannot be decoded: an unknown `Content-Encoding`, or corrupt compressed data."""


@final
class BoundedBody:
    """The body of one reply, read up to `limit` bytes after decompression.

    Args:
        encoding: The reply's `Content-Encoding` (`None`, `identity`, `gzip` or `deflate`).
        limit: Most bytes kept, after decompression.
        truncate: What happens past `limit`: with `False`, `feed` raises `BodyTooLarge`;
            with `True`, the body is kept up to `limit` and `feed` says to stop reading.

    Raises:
        BodyUnreadable: `encoding` is none of those.
    """

    __slots__ = ("_data", "_inflater", "_limit", "_truncate", "received", "truncated")

    def __init__(self, encoding: str | None, limit: int, *, truncate: bool = False) -> None:
        self._inflater = _inflater(encoding)
        self._limit = limit
        self._truncate = truncate
        self._data = bytearray()
        self.received = 0
        """Bytes taken from the wire so far (before decompression)."""
        self.truncated = False
        """The body went on past `limit` (with `truncate`): what is kept is its start."""

    @property
    def data(self) -> bytearray:
        """The body kept so far, decompressed (not to be changed)."""
        return self._data

    def feed(self, chunk: bytes) -> bool:
        """Take `chunk` from the wire; `False` once the body is cut and reading should stop.

        Raises:
            BodyTooLarge: The body is longer than `limit` (without `truncate`).
            BodyUnreadable: The compressed data is corrupt.
        """
        self.received += len(chunk)
        inflater = self._inflater
        if inflater is None:
            return self._keep(chunk)
        rest = chunk
        while rest:
            room = min(self._limit - len(self._data) + 1, _STEP)
            out, rest = inflater.inflate(rest, room)
            if not self._keep(out):
                return False
        return True

    def finish(self) -> bytearray:
        """The whole body (or its start, when cut).

        Raises:
            BodyUnreadable: The compressed data ends before the end of its stream.
        """
        if self._inflater is not None and not self.truncated:
            self._keep(self._inflater.finish())
        return self._data

    def _keep(self, out: bytes) -> bool:
        room = self._limit - len(self._data)
        if len(out) <= room:
            self._data += out
            return True
        if not self._truncate:
            raise BodyTooLarge(f"over {self._limit} bytes")
        self._data += out[:room]
        self.truncated = True
        return False


def _inflater(encoding: str | None) -> _Inflater | None:
    codings = [part.strip().lower() for part in (encoding or "").split(",")]
    codings = [coding for coding in codings if coding not in ("", "identity")]
    if not codings:
        return None
    if codings in (["gzip"], ["x-gzip"], ["deflate"]):
        return _Inflater(codings[0].removeprefix("x-"))
    raise BodyUnreadable(f"Content-Encoding {encoding!r} is not gzip or deflate")


@final
class _Inflater:
    """A gzip (several members too) or deflate (zlib-wrapped or raw) stream, inflated in
    bounded steps."""

    __slots__ = ("_coding", "_fed", "_stream")

    def __init__(self, coding: str) -> None:
        self._coding = coding
        self._stream = zlib.decompressobj(_GZIP if coding == "gzip" else _ZLIB)
        self._fed = False

    def inflate(self, data: bytes, room: int) -> tuple[bytes, bytes]:
        """At most `room` bytes inflated from `data`, and the part of `data` left to inflate."""
        if self._stream.eof:  # data after the end of the stream
            if not data.strip(b"\0"):
                return b"", b""  # padding
            if self._coding != "gzip":
                raise BodyUnreadable(f"its {self._coding} body has data after its end")
            self._stream = zlib.decompressobj(_GZIP)  # the next member
        stream = self._stream
        try:
            out = stream.decompress(data, room)
        except zlib.error as error:
            if self._coding == "deflate" and not self._fed:  # no zlib header: raw deflate
                self._stream = zlib.decompressobj(_RAW)
                self._fed = True
                return self.inflate(data, room)
            raise BodyUnreadable(f"its {self._coding} body is corrupt ({error})") from None
        self._fed = True
        return out, stream.unused_data if stream.eof else stream.unconsumed_tail

    def finish(self) -> bytes:
        """What the stream still holds, once the body ended where the stream does.

        Raises:
            BodyUnreadable: It does not.
        """
        if not self._fed:
            return b""
        stream = self._stream
        try:
            out = b"" if stream.eof else stream.flush()
        except zlib.error as error:
            raise BodyUnreadable(f"its {self._coding} body is corrupt ({error})") from None
        if not stream.eof:
            raise BodyUnreadable(f"its {self._coding} body ends before its end")
        return out
