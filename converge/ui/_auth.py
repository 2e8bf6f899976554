"""Who may use the console: reviewers' tokens (kept as SHA-256 digests) and CSRF tokens.

A token is 32 random bytes (`secrets.token_urlsafe`), so one unsalted SHA-256 digest is
enough to keep it: nobody can search a 256-bit space, and the file leaks no usable secret.
The reviewers file is JSON, `{"reviewers": [{"name": ..., "token_sha256": ...}]}`, written
by `converge ui --users FILE --add NAME` (which prints the new token once).

The console reads the file again when it changes: a reviewer removed from it (`converge ui
--users FILE --remove NAME`) is refused from the next request on, and their sessions end.
A file that cannot be read admits nobody until it is fixed.

A script that sends `Authorization: Bearer TOKEN` has no session: its forms carry an HMAC of
its token digest under a key the console draws when it starts, which cannot be guessed
without the token and is void once the console restarts (see `Sessions` for browsers).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Final, final

from pydantic import Field, ValidationError, field_validator

from .._core._escape import visible
from .._core._model import FrozenModel

__all__ = ["Reviewer", "Reviewers", "new_token", "token_digest"]

_TOKEN_BYTES: Final = 32
_LOG: Final = logging.getLogger("converge.ui")

_Stamp = tuple[int, int, int] | None
"""What says a file changed: its inode, size and modification time (`None`: missing)."""


def _stamp(path: Path) -> _Stamp:
    try:
        status = path.stat()
    except OSError:
        return None
    return status.st_ino, status.st_size, status.st_mtime_ns


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

    __slots__ = ("_by_digest", "_csrf_key", "_path", "_stamp")

    def __init__(self, reviewers: Iterable[Reviewer]) -> None:
        self._by_digest = _indexed(reviewers)
        if not self._by_digest:
            raise ValueError("a console needs at least one reviewer")
        self._csrf_key = secrets.token_bytes(_TOKEN_BYTES)
        self._path: Path | None = None
        self._stamp: _Stamp = None

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
        stamp = _stamp(path)
        try:
            reviewers = cls(_read(path))
        except ValueError as error:
            message = str(error)
            said = message if str(path) in message else f"reviewers file {path}: {message}"
            raise ValueError(said) from None
        reviewers._path = path
        reviewers._stamp = stamp
        return reviewers

    def refresh(self) -> bool:
        """Read the reviewers file again if it changed since; whether it did.

        A reviewer no longer in the file is refused from now on. A file that cannot be read,
        or lists nobody, admits nobody (a warning is logged) until it is fixed.
        """
        path = self._path
        if path is None:
            return False
        stamp = _stamp(path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            self._by_digest = _indexed(_read(path))
        except ValueError as error:
            self._by_digest = {}
            _LOG.warning("admitting nobody until the reviewers file is fixed: %s", error)
        return True

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
            existing = _read(path)
        if any(reviewer.name == name for reviewer in existing):
            raise ValueError(f"reviewers file {path} already names {name!r}")
        token = new_token()
        _write(path, (*existing, Reviewer(name=name, token_sha256=token_digest(token))))
        return token

    @staticmethod
    def remove(path: Path, name: str) -> None:
        """Remove reviewer `name` from the file at `path`: their token opens nothing more.

        A console already running refuses them too: it reads the file again when it changes.

        Raises:
            ValueError: The file cannot be read, is not a reviewers file, or does not name
                `name`.
        """
        existing = _read(path)
        kept = tuple(reviewer for reviewer in existing if reviewer.name != name)
        if len(kept) == len(existing):
            raise ValueError(f"reviewers file {path} does not name {name!r}")
        _write(path, kept)

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

    def named(self, digest: str) -> Reviewer | None:
        """The reviewer whose token has this digest, while they are admitted."""
        return self._by_digest.get(digest)

    def csrf(self, reviewer: Reviewer) -> str:
        """The CSRF token of `reviewer`'s scripts (`Authorization: Bearer`) in this console.

        A browser's session has its own.
        """
        mac = hmac.new(self._csrf_key, reviewer.token_sha256.encode(), hashlib.sha256)
        return mac.hexdigest()

    def csrf_holds(self, reviewer: Reviewer, given: str | None) -> bool:
        """Whether `given` is `reviewer`'s CSRF token."""
        return given is not None and hmac.compare_digest(self.csrf(reviewer), given)


def _indexed(reviewers: Iterable[Reviewer]) -> dict[str, Reviewer]:
    by_digest: dict[str, Reviewer] = {}
    for reviewer in reviewers:
        if reviewer.token_sha256 in by_digest:
            raise ValueError(f"reviewers {reviewer.name!r} and another share one token")
        by_digest[reviewer.token_sha256] = reviewer
    return by_digest


def _read(path: Path) -> tuple[Reviewer, ...]:
    try:
        return _File.model_validate_json(path.read_bytes()).reviewers
    except (OSError, ValidationError, ValueError) as error:
        raise ValueError(f"reviewers file {path}: {error}") from None


def _write(path: Path, reviewers: tuple[Reviewer, ...]) -> None:
    """Write the file whole, owner-only, through a temporary file and a rename."""
    text = json.dumps({"reviewers": [reviewer.model_dump() for reviewer in reviewers]}, indent=2)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text + "\n")
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)
