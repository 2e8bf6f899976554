"""Who may use the console: reviewers' tokens (kept as SHA-256 digests) and CSRF tokens.

A token is 32 random bytes (`secrets.token_urlsafe`), so one unsalted SHA-256 digest is
enough to keep it: nobody can search a 256-bit space, and the file leaks no usable secret.
The reviewers file is JSON, `{"reviewers": [{"name": ..., "token_sha256": ...}]}`, written
by `converge ui --users FILE --add NAME` (which prints the new token once).

A CSRF token is an HMAC of the reviewer's token digest under a key the console draws when it
starts: it cannot be guessed without the session's token, needs no server-side state, and
is void once the console restarts.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Final, final

from pydantic import Field, ValidationError, field_validator

from .._cli_support import visible
from .._model import FrozenModel

__all__ = ["Reviewer", "Reviewers", "new_token", "token_digest"]

_TOKEN_BYTES: Final = 32


def new_token() -> str:
    """A fresh random token (43 URL-safe characters)."""
    return secrets.token_urlsafe(_TOKEN_BYTES)


def token_digest(token: str) -> str:
    """The SHA-256 digest of `token`, as 64 hex digits."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@final
class Reviewer(FrozenModel, frozen=True):
    """One person allowed to review: a name and the digest of their token."""

    name: str = Field(min_length=1, max_length=200)
    """Who decides: recorded as `approved_by` (`GateDecision.by`) for every decision."""
    token_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """`token_digest` of the reviewer's token."""

    @field_validator("name")
    @classmethod
    def _plain(cls, name: str) -> str:
        if not name.strip() or visible(name) != name:
            raise ValueError("a reviewer's name must be printable text, not blank")
        return name


@final
class _File(FrozenModel, frozen=True):
    reviewers: tuple[Reviewer, ...]


@final
class Reviewers:
    """The reviewers a console admits, found by token."""

    __slots__ = ("_by_digest", "_csrf_key")

    def __init__(self, reviewers: Iterable[Reviewer]) -> None:
        self._by_digest: dict[str, Reviewer] = {}
        for reviewer in reviewers:
            if reviewer.token_sha256 in self._by_digest:
                raise ValueError(f"reviewers {reviewer.name!r} and another share one token")
            self._by_digest[reviewer.token_sha256] = reviewer
        if not self._by_digest:
            raise ValueError("a console needs at least one reviewer")
        self._csrf_key = secrets.token_bytes(_TOKEN_BYTES)

    @classmethod
    def single(cls, name: str) -> tuple[Reviewers, str]:
        """One reviewer with a new token; the reviewers and the token (to print once)."""
        token = new_token()
        return cls([Reviewer(name=name, token_sha256=token_digest(token))]), token

    @classmethod
    def load(cls, path: Path) -> Reviewers:
        """The reviewers in the JSON file at `path`.

        Raises:
            ValueError: The file cannot be read, or is not a reviewers file (names which).
        """
        try:
            return cls(_File.model_validate_json(path.read_bytes()).reviewers)
        except (OSError, ValidationError, ValueError) as error:
            raise ValueError(f"reviewers file {path}: {error}") from None

    @staticmethod
    def add(path: Path, name: str) -> str:
        """Add reviewer `name` with a new token to the file at `path` (created if missing).

        Returns the token: the file keeps only its digest. The file is written whole, with
        owner-only permissions, through a temporary file and a rename.

        Raises:
            ValueError: The file exists but is not a reviewers file, or already names `name`.
        """
        existing: tuple[Reviewer, ...] = ()
        if path.exists():
            existing = Reviewers.load(path).all()
        if any(reviewer.name == name for reviewer in existing):
            raise ValueError(f"reviewers file {path} already names {name!r}")
        token = new_token()
        added = (*existing, Reviewer(name=name, token_sha256=token_digest(token)))
        text = json.dumps({"reviewers": [reviewer.model_dump() for reviewer in added]}, indent=2)
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                file.write(text + "\n")
            temporary.replace(path)
        finally:
            temporary.unlink(missing_ok=True)
        return token

    def all(self) -> tuple[Reviewer, ...]:
        """Every reviewer, in the file's order."""
        return tuple(self._by_digest.values())

    def find(self, token: str | None) -> Reviewer | None:
        """The reviewer whose token this is; `None` for no token or an unknown one."""
        if not token or len(token) > 200:
            return None
        digest = token_digest(token)
        found = None
        for known, reviewer in self._by_digest.items():  # compare every digest, in constant time
            if hmac.compare_digest(known, digest):
                found = reviewer
        return found

    def csrf(self, reviewer: Reviewer) -> str:
        """The CSRF token `reviewer`'s forms carry while this console runs."""
        mac = hmac.new(self._csrf_key, reviewer.token_sha256.encode(), hashlib.sha256)
        return mac.hexdigest()

    def csrf_holds(self, reviewer: Reviewer, given: str | None) -> bool:
        """Whether `given` is `reviewer`'s CSRF token."""
        return given is not None and hmac.compare_digest(self.csrf(reviewer), given)
