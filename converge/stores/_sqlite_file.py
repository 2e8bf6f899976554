"""The SQLite file under a `SqliteRunStore`.

Opening it (to only read it, too), putting it in WAL mode, the `-shm` and `-wal` files beside
it, and which file its path names now (its device and inode).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from .._core._exceptions import StoreError
from ._sqlite_schema import NoStoreError, checked, create

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "has_log",
    "identity",
    "open_read_only",
    "open_uri",
    "open_writable",
    "shm_of",
    "wal_mode",
]


def open_uri(uri: str) -> sqlite3.Connection:
    """A connection to the `file:` URI `uri`, in autocommit mode, waiting up to 30 s for locks."""
    import sqlite3

    connection = sqlite3.connect(
        uri, uri=True, timeout=30.0, isolation_level=None, check_same_thread=False
    )
    connection.execute("PRAGMA busy_timeout = 30000")
    return connection


def open_writable(path: Path, *, first: bool) -> sqlite3.Connection:
    """A connection that writes the store at `path`, in autocommit mode.

    On the `first` connection of a store, the folder is made if needed, the file put in WAL
    mode and its tables made or upgraded (`create`).
    """
    import sqlite3

    if first:
        path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA busy_timeout = 30000")
    if first:
        wal_mode(connection)
        create(connection, path)
    return connection


def wal_mode(connection: sqlite3.Connection) -> None:
    """Put the file in WAL mode, waiting while another process does the same.

    Switching the journal mode ignores the busy timeout: two processes opening a new file at
    once may be told "database is locked" at once, so this retries for up to 30 s.
    """
    import sqlite3
    import time

    deadline = time.monotonic() + 30.0
    while True:
        try:
            (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
            if str(mode).lower() != "wal":
                connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if error.sqlite_errorname not in ("SQLITE_BUSY", "SQLITE_LOCKED") or (
                time.monotonic() > deadline
            ):
                raise
            time.sleep(0.02)


def shm_of(path: Path) -> Path:
    """The WAL index (`-shm`) file beside `path`."""
    return path.with_name(f"{path.name}-shm")


def has_log(path: Path) -> bool:
    """Whether the write-ahead log beside `path` holds anything (it may hold saves)."""
    try:
        return path.with_name(f"{path.name}-wal").stat().st_size > 0
    except OSError:
        return False


def identity(path: Path) -> tuple[int, int] | None:
    """The device and inode of the file at `path` (`None`: there is none)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def open_read_only(path: Path) -> tuple[sqlite3.Connection, str]:
    """A connection that only reads the store at `path`, and the `file:` URI it opened.

    The URI has `mode=ro`, or, when the WAL's `-shm` file is missing and cannot be created
    and no write-ahead log holds saves, `immutable=1`: the file alone is then the store.

    Raises:
        NoStoreError: There is no store at `path` (yet).
        StoreError: The file cannot be read, or is not a converge store of this schema.
    """
    import sqlite3

    if not path.is_file():
        raise NoStoreError(f"no store at {path}")
    uri = f"{path.absolute().as_uri()}?mode=ro"
    try:
        connection = checked(open_uri(uri), path)
    except sqlite3.OperationalError as error:
        # A WAL file needs its -shm file, missing here and not creatable (a read-only
        # folder: SQLITE_CANTOPEN as root, SQLITE_READONLY_DIRECTORY otherwise). With no
        # write-ahead log to read, the file alone is the whole store: read it as it is.
        name = error.sqlite_errorname
        if name != "SQLITE_CANTOPEN" and not name.startswith("SQLITE_READONLY"):
            raise StoreError(f"cannot read {path}: {error}") from None
        if shm_of(path).exists():
            raise StoreError(f"cannot read {path}: {error}") from None
        if has_log(path):
            raise StoreError(
                f"cannot read {path} read-only: its write-ahead log "
                f"({path.name}-wal) holds saves that need the missing "
                f"{path.name}-shm file, which this folder does not let it create"
            ) from None
        uri += "&immutable=1"
        connection = checked(open_uri(uri), path)
    return connection, uri
