"""The SQLite file under a `SqliteRunStore`.

Opening it, putting it in WAL mode, the `-shm` and `-wal` files beside it, and which file
its path names now (its device and inode).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3

__all__ = ["has_log", "identity", "open_uri", "shm_of", "wal_mode"]


def open_uri(uri: str) -> sqlite3.Connection:
    """A connection to the `file:` URI `uri`, in autocommit mode, waiting up to 30 s for locks."""
    import sqlite3

    connection = sqlite3.connect(
        uri, uri=True, timeout=30.0, isolation_level=None, check_same_thread=False
    )
    connection.execute("PRAGMA busy_timeout = 30000")
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
