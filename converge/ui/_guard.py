"""The console's gate: every request's `Host`, who sent it, and where a POST came from.

In this order: the `Host` must name the console (else 400, before anything else); the
reviewers file is read again if it changed (a removed reviewer's sessions end); sign-in,
sign-out and one-time links are answered; any other request needs a session cookie or
`Authorization: Bearer` (else the sign-in form, 401); and a POST must come from this
console's exact origin. Every response gets the security headers.
"""

from __future__ import annotations

from typing import Final, final

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._core._escape import esc
from ._auth import Reviewers
from ._html import POLICY, Viewer, page
from ._origin import Origin, origin_of_request
from ._sessions import Sessions
from ._signin import SignedIn, SignIn, origin_refusal

__all__ = ["Guard", "signed_in"]

_HEADERS: Final = (
    (b"content-security-policy", POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)
_SAFE: Final = frozenset({"GET", "HEAD"})


def signed_in(request: Request) -> SignedIn:
    """Who sent `request` (the guard admitted it)."""
    found: SignedIn = request.scope["state"]["signed_in"]
    return found


@final
class Guard:
    """ASGI middleware: the `Host`, sign-in, sessions, `Origin`, and the security headers."""

    __slots__ = ("_app", "_configured", "_reviewers", "_sessions")

    def __init__(
        self, app: ASGIApp, reviewers: Reviewers, sessions: Sessions, origin: Origin | None
    ) -> None:
        self._app = app
        self._reviewers = reviewers
        self._sessions = sessions
        self._configured = origin

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        origin = origin_of_request(scope, self._configured)
        if origin is None:
            await _bad_host(scope, self._configured)(scope, receive, secured)
            return
        reviewers = self._reviewers
        if reviewers.refresh():
            self._sessions.keep_only(lambda digest: reviewers.named(digest) is not None)
        request = Request(scope, receive)
        answer = await self._answer(request, origin)
        if answer is not None:
            await answer(scope, receive, secured)
            return
        await self._app(scope, receive, secured)

    def _signed_in(self, request: Request, origin: Origin) -> SignedIn | None:
        bearer = request.headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            reviewer = self._reviewers.find(bearer[7:].strip())
            if reviewer is None:
                return None
            return SignedIn(reviewer, self._reviewers.csrf(reviewer), None)
        session_id = request.cookies.get(origin.cookie)
        session = self._sessions.find(session_id)
        if session is None:
            return None
        reviewer = self._reviewers.named(session.reviewer)
        if reviewer is None:
            self._sessions.end(session_id)
            return None
        return SignedIn(reviewer, session.csrf, session_id)

    async def _answer(self, request: Request, origin: Origin) -> Response | None:
        """The guard's own answer, or `None` to let the console answer."""
        method = request.method
        path = request.scope["path"]
        signed = self._signed_in(request, origin)
        sign_in = SignIn(self._reviewers, self._sessions, origin)
        if path == "/sign-in":
            return (
                await sign_in.post(request, signed)
                if method == "POST"
                else sign_in.form(request, signed)
            )
        if path == "/sign-out" and method == "POST":
            return await sign_in.sign_out(request, signed)
        code = request.query_params.get("token") if method == "GET" else None  # HEAD uses none
        if code is not None:
            return sign_in.link(request, code, signed)
        if signed is None:
            return sign_in.needed(request)
        if method not in _SAFE:
            refused = origin_refusal(request, origin, scripted=signed.session is None)
            if refused is not None:
                said = f"Refused: {refused}. Nothing was done."
                return _refusal("Refused", said, signed.viewer, 403)
        request.scope.setdefault("state", {})["signed_in"] = signed
        return None


def _bad_host(scope: Scope, configured: Origin | None) -> Response:
    host = ""
    for name, value in scope.get("headers", ()):
        if name == b"host":
            host = value.decode("latin-1")[:100]
    server = scope.get("server") or ("?", "?")
    expected = f"{server[0]}:{server[1]}"
    if configured is not None:
        expected = configured.serialized.split("://", 1)[1]
    said = (
        f"Bad Host header {host!r}: this console answers to {expected} only "
        "(behind a proxy, start it with --origin and have the proxy pass that host)."
    )
    return _refusal("Bad request", said, None, 400)


def _refusal(title: str, said: str, viewer: Viewer | None, status: int) -> Response:
    body = (
        f'<h1>{esc(title)}</h1><div class="message refused" data-message><p>{esc(said)}</p></div>'
    )
    return HTMLResponse(page(title, body, viewer=viewer), status_code=status)
