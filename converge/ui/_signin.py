"""Signing in and out: the sign-in form, one-time links, and the pages they answer with.

A browser signs in two ways only: the console's own sign-in form (a same-origin POST of a
reviewer's token), or a one-time link (`/?token=CODE`, void once used). A link never
switches a signed-in reviewer to another one without asking: it shows a page naming both,
whose button signs in as the link's reviewer. A reviewer's token in a link is refused (a
link stays in the browser's history). Every redirect goes to a path on this console.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import final
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from .._core._escape import esc
from ._auth import Reviewer, Reviewers
from ._form import FormError, read_form
from ._html import Viewer, hidden, page
from ._origin import Origin, local_path
from ._sessions import Sessions

__all__ = ["SignIn", "SignedIn", "origin_refusal"]

_SAFE = frozenset({"GET", "HEAD"})


@final
@dataclass(frozen=True, slots=True)
class SignedIn:
    """Who sent a request: the reviewer, their forms' CSRF token, and their session id.

    `session` is `None` for a script that sent `Authorization: Bearer`.
    """

    reviewer: Reviewer
    csrf: str
    session: str | None

    @property
    def viewer(self) -> Viewer:
        """The reviewer as pages show them."""
        return Viewer(self.reviewer.name, self.csrf, self.session is not None)

    def csrf_holds(self, given: str | None) -> bool:
        """Whether `given` is this reviewer's CSRF token (constant time)."""
        return given is not None and hmac.compare_digest(self.csrf.encode(), given.encode())


def origin_refusal(request: Request, origin: Origin, *, scripted: bool) -> str | None:
    """Why a POST is refused for where it came from (`None`: it came from this console).

    A browser sends `Origin` with every POST: it must be this console's exact scheme, host and
    port. A request without one is accepted only from a script (`Authorization: Bearer`).
    """
    given = request.headers.get("origin")
    if given is None:
        if scripted:
            return None
        return "the browser sent no Origin header, so the form cannot be shown to come from here"
    if given != origin.serialized:
        shown = given[:100].encode("ascii", "backslashreplace").decode("ascii")
        return f"the form came from {shown}, not from this console ({origin.serialized})"
    return None


def _message(title: str, said: str, viewer: Viewer | None, status: int, back: str = "") -> Response:
    link = f'<p><a href="{esc(back)}">back</a></p>' if back else ""
    kind = "message refused" if status == 403 else "message"
    body = f'<h1>{esc(title)}</h1><div class="{kind}" data-message><p>{esc(said)}</p></div>{link}'
    return HTMLResponse(page(title, body, viewer=viewer), status_code=status)


@final
class SignIn:
    """The sign-in form, one-time links and sign-out, for one request's origin."""

    __slots__ = ("_origin", "_reviewers", "_sessions")

    def __init__(self, reviewers: Reviewers, sessions: Sessions, origin: Origin) -> None:
        self._reviewers = reviewers
        self._sessions = sessions
        self._origin = origin

    # -- pages ---------------------------------------------------------------------------

    def _form_page(self, said: str, target: str, signed: SignedIn | None, status: int) -> Response:
        note = f'<div class="message" data-message><p>{esc(said)}</p></div>' if said else ""
        current = (
            f"<p class='note'>You are signed in as <b>{esc(signed.reviewer.name)}</b>; signing "
            "in as someone else ends that session.</p>"
            if signed is not None
            else ""
        )
        body = (
            f"<h1>Sign in</h1>{note}{current}"
            '<form class="sign-in" method="post" action="/sign-in" data-sign-in>'
            '<label>Your reviewer token<br><input type="password" name="token" '
            'autocomplete="off" required></label>'
            f'{hidden("next", target)}<br><button type="submit">Sign in</button></form>'
            "<p class='note'>Your token is the one <code>converge ui</code> printed, or the one "
            "<code>converge ui --users FILE --add NAME</code> gave you. The console does not "
            "keep it in your browser: the browser gets a session cookie that ends when you "
            "sign out, when you leave the console idle or after its lifetime, and when the "
            "console stops.</p>"
        )
        viewer = signed.viewer if signed is not None else None
        return HTMLResponse(page("Sign in", body, viewer=viewer), status_code=status)

    def needed(self, request: Request) -> Response:
        """The answer to a request without a valid session or token."""
        if request.method in _SAFE:
            return self._form_page("", _here(request), None, 401)
        return _message(
            "Sign-in needed",
            "This console admits reviewers who signed in: open it in your browser and sign "
            "in, or send Authorization: Bearer TOKEN.",
            None,
            401,
        )

    def form(self, request: Request, signed: SignedIn | None) -> Response:
        """`GET /sign-in`: the form."""
        return self._form_page("", local_path(request.query_params.get("next", "/")), signed, 200)

    def _confirm(
        self, code: str, reviewer: Reviewer, target: str, signed: SignedIn | None
    ) -> Response:
        if signed is not None:
            said = (
                f"You are signed in as {signed.reviewer.name}. This link signs in as "
                f"{reviewer.name}."
            )
            stay = f'<a href="{esc(target)}">Stay signed in as {esc(signed.reviewer.name)}</a>'
        else:
            said = f"This link, opened from another site, signs you in as {reviewer.name}."
            stay = '<a href="/sign-in">Cancel</a>'
        body = (
            f'<h1>Switch reviewer?</h1><div class="message" data-message data-confirm-switch>'
            f"<p>{esc(said)} Decisions are recorded under the name you are signed in as.</p></div>"
            f'<form method="post" action="/sign-in">{hidden("link", code)}{hidden("next", target)}'
            f'<button type="submit">Sign in as {esc(reviewer.name)}</button> {stay}</form>'
        )
        viewer = signed.viewer if signed is not None else None
        return HTMLResponse(page("Switch reviewer?", body, viewer=viewer), status_code=200)

    # -- signing in ----------------------------------------------------------------------

    def _start(self, request: Request, reviewer: Reviewer, target: str) -> Response:
        cookie = self._origin.cookie
        self._sessions.end(request.cookies.get(cookie))
        session = self._sessions.start(reviewer)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            cookie,
            session,
            max_age=int(self._sessions.lifetime_seconds),
            path="/",
            secure=self._origin.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response

    def link(self, request: Request, code: str, signed: SignedIn | None) -> Response:
        """`GET ...?token=CODE`: a one-time link."""
        state, digest = self._sessions.link_state(code)
        target = _here(request, drop="token")
        reviewer = self._reviewers.named(digest) if digest is not None else None
        if reviewer is None:
            if state == "used":
                said = "This sign-in link was already used: a link signs in once."
            elif self._reviewers.find(code) is not None:
                said = (
                    "A reviewer's token is not accepted in a link (a link stays in the "
                    "browser's history): enter it in the sign-in form instead."
                )
            else:
                said = (
                    "This sign-in link is not valid: it may be from before the console restarted."
                )
            if signed is not None:
                said += f" You are still signed in as {signed.reviewer.name}."
                return _message("Link refused", said, signed.viewer, 403, back=target)
            return self._form_page(said + " Sign in with your token.", target, None, 401)
        if signed is not None and signed.reviewer != reviewer:
            return self._confirm(code, reviewer, target, signed)
        if signed is None and request.headers.get("sec-fetch-site") in ("cross-site", "same-site"):
            return self._confirm(code, reviewer, target, None)
        self._sessions.use_link(code)
        if signed is not None and signed.session is not None:
            return RedirectResponse(target, status_code=303)  # the same reviewer: keep the session
        return self._start(request, reviewer, target)

    async def post(self, request: Request, signed: SignedIn | None) -> Response:
        """`POST /sign-in`: the form's token, or a confirmed link."""
        refused = origin_refusal(request, self._origin, scripted=False)
        if refused is not None:
            return _message("Refused", f"Sign-in refused: {refused}.", None, 403)
        try:
            form = await read_form(request)
        except FormError as error:
            return _message("Bad request", f"{error}.", None, 400)
        target = local_path(form.get("next") or "/")
        if "link" in form:
            digest = self._sessions.use_link(form["link"])
            reviewer = self._reviewers.named(digest) if digest is not None else None
            if reviewer is None:
                said = (
                    "This sign-in link was already used or is not valid. Sign in with your token."
                )
                return self._form_page(said, target, signed, 401)
        else:
            reviewer = self._reviewers.find(form.get("token"))
            if reviewer is None:
                said = "That is not a reviewer's token of this console."
                return self._form_page(said, target, signed, 401)
        return self._start(request, reviewer, target)

    async def sign_out(self, request: Request, signed: SignedIn | None) -> Response:
        """`POST /sign-out`: end the session and drop the cookie."""
        if signed is None:
            return self.needed(request)
        if signed.session is None:
            said = "Nothing to sign out: this request signed in with Authorization: Bearer."
            return _message("Bad request", said, signed.viewer, 400)
        refused = origin_refusal(request, self._origin, scripted=False)
        if refused is not None:
            return _message("Refused", f"Sign-out refused: {refused}.", signed.viewer, 403)
        try:
            form = await read_form(request)
        except FormError as error:
            return _message("Bad request", f"{error}.", signed.viewer, 400)
        if not signed.csrf_holds(form.get("csrf")):
            said = "The form did not carry this session's CSRF token: you are still signed in."
            return _message("Refused", said, signed.viewer, 403)
        self._sessions.end(signed.session)
        response = RedirectResponse("/sign-in", status_code=303)
        response.delete_cookie(
            self._origin.cookie,
            path="/",
            secure=self._origin.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response


def _here(request: Request, drop: str = "") -> str:
    """This request's path and query, as a local redirect target (`drop` left out)."""
    raw: bytes = request.scope.get("raw_path") or request.scope["path"].encode()
    path = raw.decode("latin-1").split("?", 1)[0]
    kept = [(k, v) for k, v in request.query_params.multi_items() if k != drop]
    query = urlencode(kept)
    return local_path(path + (f"?{query}" if query else ""))
