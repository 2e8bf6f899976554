"""`Exchange`: one HTTP attempt of a provider, its body read under a byte cap.

The caller runs `post` under one deadline for the whole attempt (connect, headers and body:
`httpx`'s own timeouts are per read, which a trickling body resets with every byte); what the
`Exchange` records as it goes (whether the request was sent, the status, the bytes of the body
so far) says how far it got when the deadline cut it short.
"""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, cast, final

import anyio
from pydantic import JsonValue

from ._body import BodyTooLarge, BodyUnreadable, BoundedBody

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Awaitable, Callable

    import httpx

__all__ = ["Answer", "Exchange"]

ACCEPT_ENCODING: Final = "gzip, deflate"
"""The encodings asked for: the ones `BoundedBody` inflates itself, within its cap."""


@final
@dataclass(frozen=True, slots=True)
class Answer:
    """What the server answered."""

    status: int
    """The HTTP status."""
    retry_after: str | None
    """Its `Retry-After` header."""
    body: bytearray
    """The body, decompressed: whole for a `200`, else at most the error cap."""
    truncated: bool
    """The body went on past what was read (an error answer)."""


@final
class Exchange:
    """One POST and its reply, with what is known of its progress at any moment."""

    __slots__ = ("body", "sent", "status")

    def __init__(self) -> None:
        self.sent = False
        """The request's headers started out: the server may have it (and generate)."""
        self.status: int | None = None
        """The reply's status, once its headers came."""
        self.body: BoundedBody | None = None
        """The body being read, once the headers came."""

    async def post(
        self,
        client: httpx.AsyncClient,
        url: str,
        payload: dict[str, JsonValue],
        headers: dict[str, str],
        *,
        limit: int,
        error_limit: int,
        on_data: Callable[[bytearray], Awaitable[None]] | None = None,
    ) -> Answer:
        """POST `payload` to `url`; read a `200` body up to `limit`, another up to
        `error_limit` (cut there; one that cannot be decoded is described instead).

        `on_data` is given a `200` body so far, decompressed, each time more of it came.

        Raises:
            httpx.HTTPError: The transport failed.
            converge_suggestors._body.BodyTooLarge: A `200` body is longer than `limit`.
            converge_suggestors._body.BodyUnreadable: A `200` body cannot be decoded.
        """
        sent = {**headers, "Accept-Encoding": ACCEPT_ENCODING}
        extensions = {"trace": self._trace}
        async with client.stream(
            "POST", url, json=payload, headers=sent, extensions=extensions
        ) as response:
            status = self.status = response.status_code
            ok = status == 200
            retry_after = response.headers.get("Retry-After")
            try:
                body = self.body = BoundedBody(
                    response.headers.get("Content-Encoding"),
                    limit if ok else error_limit,
                    truncate=not ok,
                )
                await self._read(response, body, on_data if ok else None)
                return Answer(status, retry_after, body.finish(), body.truncated)
            except BodyUnreadable as error:
                if ok:
                    raise
                text = f"(an unreadable body: {error})"  # the status is what matters
                return Answer(status, retry_after, bytearray(text.encode()), truncated=False)

    @staticmethod
    async def _read(
        response: httpx.Response,
        body: BoundedBody,
        on_data: Callable[[bytearray], Awaitable[None]] | None,
    ) -> None:
        """Feed `body` the response's bytes until it ends, or `body` says to stop; after
        each piece, hand `on_data` the body so far.

        To stop, the read is cancelled rather than left with `break`: the cancellation is
        raised inside the HTTP client's nested generators, which it ends one by one (a
        `break` would leave them suspended, for the garbage collector to close).

        Raises:
            converge_suggestors._body.BodyTooLarge: From `body`.
            converge_suggestors._body.BodyUnreadable: From `body`.
            Exception: What `on_data` raised.
        """
        failure: Exception | None = None
        with anyio.CancelScope() as reading:
            raw = cast("AsyncGenerator[bytes]", response.aiter_raw())  # it is one
            async with aclosing(raw) as chunks:
                async for chunk in chunks:
                    if reading.cancel_called:
                        continue  # read before the stream noticed the cancellation
                    try:
                        more = body.feed(chunk)
                    except (BodyTooLarge, BodyUnreadable) as error:
                        failure, more = error, False
                    if more and on_data is not None:
                        try:
                            await on_data(body.data)
                        except Exception as error:  # raised once the read has stopped
                            failure, more = error, False
                    if not more:
                        reading.cancel()
        if failure is not None:
            raise failure

    async def _trace(self, event: str, info: object) -> None:
        """httpcore's progress events: the request is out once its headers start."""
        if event.endswith("send_request_headers.started"):
            self.sent = True

    def progress(self) -> str:
        """How far the exchange got, in words."""
        if self.status is None:
            return "no answer yet"
        received = 0 if self.body is None else self.body.received
        return f"status {self.status}; {received} bytes of the body had come"
