"""Signed-in browsers: sessions and one-time sign-in links, kept in the console's memory.

A browser that signs in gets a cookie holding a random session id (32 bytes), never a
reviewer's token; everything else (who, when, the session's CSRF token) stays on the
server. A session ends at sign-out, after `idle_seconds` without a request, after
`lifetime_seconds` in all, when its reviewer is removed from the reviewers file, and when
the console stops: the table lives in memory, so a restart signs everyone out.

A one-time link (`/?token=CODE`) carries a random code that signs its reviewer in once; it
is void once used, after `lifetime_seconds`, and when the console stops.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final, Literal, final

from ._auth import Reviewer

__all__ = ["LinkState", "Session", "Sessions"]

_ID_BYTES: Final = 32
_LONGEST: Final = 200
"""Longer ids and codes are nobody's: refused before they are hashed."""

LinkState = Literal["valid", "used", "unknown"]
"""What a one-time link's code is: unused (and not expired), used already, or never issued
by this console (or expired, or from before a restart)."""


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


@final
@dataclass(frozen=True, slots=True)
class Session:
    """One signed-in browser."""

    reviewer: str
    """The reviewer's token digest (`Reviewer.token_sha256`)."""
    csrf: str
    """The CSRF token this session's forms carry."""
    started: float
    """When it began (the `Sessions` clock)."""
    seen: float
    """Its last request."""


@final
@dataclass(frozen=True, slots=True)
class _Link:
    reviewer: str
    issued: float


@final
class Sessions:
    """The console's sessions and one-time links, in memory (a restart signs everyone out)."""

    __slots__ = ("_clock", "_idle", "_lifetime", "_limit", "_links", "_sessions", "_used")

    def __init__(
        self,
        *,
        lifetime_seconds: float = 12 * 3600.0,
        idle_seconds: float = 2 * 3600.0,
        limit: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Sessions that last at most `lifetime_seconds`, and `idle_seconds` without a request.

        At most `limit` sessions are kept: beyond it, starting one ends the oldest.
        """
        if lifetime_seconds <= 0 or idle_seconds <= 0 or limit < 1:
            raise ValueError("session lifetimes must be positive and the limit at least 1")
        self._lifetime = lifetime_seconds
        self._idle = idle_seconds
        self._limit = limit
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._links: dict[str, _Link] = {}
        self._used: set[str] = set()

    @property
    def lifetime_seconds(self) -> float:
        """How long a session lasts at most (the cookie's `Max-Age`)."""
        return self._lifetime

    # -- one-time links ------------------------------------------------------------------

    def link(self, reviewer: Reviewer) -> str:
        """A new one-time sign-in code for `reviewer` (43 URL-safe characters)."""
        code = secrets.token_urlsafe(_ID_BYTES)
        self._links[_digest(code)] = _Link(reviewer.token_sha256, self._clock())
        return code

    def link_state(self, code: str) -> tuple[LinkState, str | None]:
        """What `code` is, and for a valid one the reviewer's token digest (nothing is used)."""
        if not code or len(code) > _LONGEST:
            return "unknown", None
        digest = _digest(code)
        if digest in self._used:
            return "used", None
        found = self._links.get(digest)
        if found is None:
            return "unknown", None
        if self._clock() - found.issued > self._lifetime:
            del self._links[digest]
            return "unknown", None
        return "valid", found.reviewer

    def use_link(self, code: str) -> str | None:
        """Use `code` up: its reviewer's token digest, or `None` when it is not valid."""
        state, reviewer = self.link_state(code)
        if state != "valid":
            return None
        digest = _digest(code)
        del self._links[digest]
        self._used.add(digest)
        return reviewer

    # -- sessions ------------------------------------------------------------------------

    def start(self, reviewer: Reviewer) -> str:
        """A new session for `reviewer`; its id, for the cookie."""
        now = self._clock()
        self._expire(now)
        while len(self._sessions) >= self._limit:
            del self._sessions[next(iter(self._sessions))]  # the oldest
        session_id = secrets.token_urlsafe(_ID_BYTES)
        csrf = secrets.token_hex(_ID_BYTES)
        self._sessions[_digest(session_id)] = Session(reviewer.token_sha256, csrf, now, now)
        return session_id

    def find(self, session_id: str | None) -> Session | None:
        """The live session with this id (its last request now), or `None`."""
        if not session_id or len(session_id) > _LONGEST:
            return None
        digest = _digest(session_id)
        session = self._sessions.get(digest)
        if session is None:
            return None
        now = self._clock()
        if now - session.started > self._lifetime or now - session.seen > self._idle:
            del self._sessions[digest]
            return None
        touched = replace(session, seen=now)
        self._sessions[digest] = touched
        return touched

    def end(self, session_id: str | None) -> bool:
        """End the session with this id; whether there was one."""
        if not session_id or len(session_id) > _LONGEST:
            return False
        return self._sessions.pop(_digest(session_id), None) is not None

    def keep_only(self, admitted: Callable[[str], bool]) -> int:
        """End the sessions and links of reviewers `admitted` refuses; how many sessions ended.

        `admitted` is asked with each reviewer's token digest.
        """
        gone = [d for d, session in self._sessions.items() if not admitted(session.reviewer)]
        for digest in gone:
            del self._sessions[digest]
        for digest in [d for d, link in self._links.items() if not admitted(link.reviewer)]:
            del self._links[digest]
        return len(gone)

    def _expire(self, now: float) -> None:
        lifetime, idle = self._lifetime, self._idle
        expired = [
            digest
            for digest, session in self._sessions.items()
            if now - session.started > lifetime or now - session.seen > idle
        ]
        for digest in expired:
            del self._sessions[digest]
