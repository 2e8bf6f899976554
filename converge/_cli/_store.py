"""Which run store a command uses, how a printed command names it, and where reports go."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from pathlib import Path
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .._core._error import UsageError
from ..stores import PostgresRunStore, SqliteRunStore

__all__ = [
    "DEFAULT_STORE",
    "close_stores",
    "given_store",
    "on_sqlite",
    "open_store",
    "report_path",
    "store_argument",
]

DEFAULT_STORE: Final = Path(".converge") / "runs.db"

_POSTGRES: Final = ("postgresql://", "postgres://")


def given_store(option: str | None) -> str:
    """The store `--store`, `CONVERGE_STORE` or the default names (as given, not resolved)."""
    return option or os.environ.get("CONVERGE_STORE") or str(DEFAULT_STORE)


def on_sqlite(option: str | None) -> bool:
    """Whether `--store` (or its default) names a SQLite file, not a PostgreSQL database."""
    return not given_store(option).startswith(_POSTGRES)


def store_argument(option: str | None) -> str:
    """` --store TARGET` for a printed command to find the same store; `""` for the default.

    A PostgreSQL URL is printed without its password (in the address or as a `password`
    parameter): the reader supplies it as libpq does, from `PGPASSWORD` or `~/.pgpass`.
    """
    target = given_store(option)
    if target == str(DEFAULT_STORE):
        return ""
    if target.startswith(_POSTGRES):
        target = _without_password(target)
    return f" --store {shlex.quote(target)}"


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        credentials, _, host = netloc.rpartition("@")
        netloc = f"{credentials.partition(':')[0]}@{host}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


_OPEN: dict[tuple[str, bool], tuple[SqliteRunStore | PostgresRunStore, str]] = {}
"""The stores this command opened, reused within it and closed by `close_stores`."""


def open_store(
    option: str | None, *, read_only: bool = False
) -> tuple[SqliteRunStore | PostgresRunStore, str]:
    """The store named by `--store`, `CONVERGE_STORE`, or the default SQLite file.

    `read_only` opens the store read-only: a SQLite file must exist, a PostgreSQL database
    is read in read-only transactions; nothing is created, upgraded or written. Opening the
    same store twice in one command gives the same store (one connection).
    """
    target = given_store(option)
    opened = _OPEN.get((target, read_only))
    if opened is None:
        if target.startswith(_POSTGRES):
            opened = PostgresRunStore(target, read_only=read_only), "PostgreSQL store"
        else:
            opened = SqliteRunStore(target, read_only=read_only), target
        _OPEN[target, read_only] = opened
    return opened


def close_stores() -> None:
    """Close every store `open_store` opened (a SQLite file is left without its WAL)."""
    while _OPEN:
        _, (store, _) = _OPEN.popitem()
        store.close()


_UNSAFE_NAME: Final = re.compile(r"[^A-Za-z0-9._-]")
_MAX_NAME: Final = 100


def report_path(store_label: str, run_id: str) -> Path:
    """Where the report of `run_id` goes: `reports/NAME.html` beside the store file.

    NAME keeps the run id when it is only letters, digits, `.`, `_` and `-` (not first `.`),
    up to 100 characters; otherwise the other characters become `_`, and a digest of the
    run id is added so that two run ids never share a report.

    Raises:
        UsageError: The file would not be inside the reports folder (a symlink points out).
    """
    store = Path(store_label)
    folder = (store.parent if store_label.endswith(".db") else Path(".converge")) / "reports"
    name = _UNSAFE_NAME.sub("_", run_id).lstrip(".")[:_MAX_NAME]
    if name != run_id:
        digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        name = f"{name}-{digest}" if name else f"run-{digest}"
    path = folder / f"{name}.html"
    if path.resolve().parent != folder.resolve():
        raise UsageError(f"the report of run {run_id} would be written outside {folder}")
    return path
