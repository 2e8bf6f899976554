"""`Exchange`: one HTTP attempt of a provider, its body read under a byte cap.

The caller runs `post` under one deadline for the whole attempt (connect, headers and body:
`httpx`'s own timeouts are per read, which a trickling body resets with every byte); what the
`Exchange` records as it goes (whether the request was sent, the status, the bytes of the body
so far) says how far it got when the deadline cut it short.
"""

from __future__ import annotations

from contextlib import aclosing
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, cast, final

import anyio

from ._body import BodyTooLarge, BodyUnreadable, BoundedBody

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Awaitable, Callable
    from contextlib import AbstractAsyncContextManager

    import httpx

__all__ = ["Answer", "Exchange", "bounded_transport"]

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

    __slots__ = ("body", "error", "error_limit", "sent", "status")

    def __init__(self) -> None:
        self.error: Answer | None = None
        """An error answer, read by the transport before the SDK could read it whole."""
        self.error_limit = 0
        """The most bytes of an error answer's body read."""
        self.sent = False
        """The request's headers started out: the server may have it (and generate)."""
        self.status: int | None = None
        """The reply's status, once its headers came."""
        self.body: BoundedBody | None = None
        """The body being read, once the headers came."""

    async def post(
        self,
        open_reply: Callable[[], AbstractAsyncContextManager[httpx.Response | None]],
        *,
        limit: int,
        error_limit: int,
        on_data: Callable[[bytearray], Awaitable[None]] | None = None,
    ) -> Answer:
        """Send the request `open_reply` makes (through a client whose transport is a
        `BoundedTransport`); read a `200` body up to `limit`, another up to `error_limit`
        (cut there; one that cannot be decoded is described instead).

        `open_reply` yields the reply's unread response, or `None` when the transport read
        an error answer already (the SDK reads an error answer's body whole: the transport
        reads it first, within `error_limit`). `on_data` is given a `200` body so far,
        decompressed, each time more of it came.

        Raises:
            httpx.HTTPError: The transport failed.
            converge_suggestors._body.BodyTooLarge: A `200` body is longer than `limit`.
            converge_suggestors._body.BodyUnreadable: A `200` body cannot be decoded.
        """
        self.error_limit = error_limit
        token = _CURRENT.set(self)
        try:
            async with open_reply() as response:
                if response is None:
                    if self.error is None:  # pragma: no cover - the transport always sets it
                        raise AssertionError("an error answer that the transport did not read")
                    return self.error
                return await self._answer(response, limit, on_data)
        finally:
            _CURRENT.reset(token)

    async def answer_error(self, response: httpx.Response) -> Answer:
        """An error answer, its body read within the error cap."""
        return await self._answer(response, self.error_limit, None)

    async def _answer(
        self,
        response: httpx.Response,
        limit: int,
        on_data: Callable[[bytearray], Awaitable[None]] | None,
    ) -> Answer:
        """Read `response`'s body: a `200` up to `limit`, another up to the error cap."""
        status = self.status = response.status_code
        ok = status == 200
        retry_after = response.headers.get("Retry-After")
        try:
            body = self.body = BoundedBody(
                response.headers.get("Content-Encoding"),
                limit if ok else self.error_limit,
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

    async def trace(self, event: str, info: object) -> None:
        """httpcore's progress events: the request is out once its headers start."""
        if event.endswith("send_request_headers.started"):
            self.sent = True

    def progress(self) -> str:
        """How far the exchange got, in words."""
        if self.status is None:
            return "no answer yet"
        received = 0 if self.body is None else self.body.received
        return f"status {self.status}; {received} bytes of the body had come"


_CURRENT: ContextVar[Exchange] = ContextVar("converge_exchange")
"""The exchange of the attempt running in this task, for the transport to report to."""


def bounded_transport() -> httpx.AsyncBaseTransport:
    """A `BoundedTransport` over httpx's own."""
    import httpx

    class BoundedTransport(httpx.AsyncBaseTransport):
        """httpx's transport, reporting to the running `Exchange`: the request's progress
        (whether it was sent), and an error answer's body read within the exchange's cap.

        The SDK reads an error answer's body whole before raising (an endless 404 body was
        read for 20 s, to 887 MB; a gzip bomb to 400 MB): this transport reads it first,
        within the cap, and hands the SDK what was kept.
        """

        def __init__(self) -> None:
            self._inner = httpx.AsyncHTTPTransport()

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            exchange = _CURRENT.get(None)
            if exchange is None:
                return await self._inner.handle_async_request(request)
            request.extensions["trace"] = exchange.trace
            response = await self._inner.handle_async_request(request)
            exchange.status = response.status_code
            if response.is_success:  # the SDK leaves it unread: the exchange reads it
                return response
            try:
                answer = exchange.error = await exchange.answer_error(response)
            finally:
                await response.aclose()
            headers = [
                (name, value)
                for name, value in response.headers.multi_items()
                if name.lower() not in _BODY_HEADERS
            ]
            return httpx.Response(
                response.status_code,
                headers=headers,
                content=bytes(answer.body),
                request=request,
            )

        async def aclose(self) -> None:
            await self._inner.aclose()

    return BoundedTransport()


_BODY_HEADERS: Final = frozenset({"content-encoding", "content-length", "transfer-encoding"})
"""The headers of an error answer's body that do not hold for what the transport kept."""
