"""The tables of a SQLite store: made, upgraded in place, and checked before a read.

A writable store makes its tables on its first connection and brings an older schema up to
`SCHEMA_VERSION` in the same transaction (`create`, `upgrade`); a read-only store changes
nothing and only checks that the file is a converge store of this schema version
(`checked`), or not one yet (`NoStoreError`: no runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .._core._exceptions import StoreError
from .._core._store import SCHEMA_VERSION
from ._conversions import recounted, reindexed
from ._sql import (
    ADD_COUNTS,
    COUNTS_INDEX,
    GATE_INSERT,
    GATES_TABLE,
    INDEX_SELECT,
    INDEX_UPDATE,
    INDEXES,
    JOURNAL_COLUMNS,
    JOURNAL_TABLE,
    RECOUNT_SELECT,
    RECOUNT_UPDATE,
    RUN_COLUMNS,
    UPGRADES,
    counts_missing,
    newer,
)

if TYPE_CHECKING:
    import sqlite3

__all__ = ["NoStoreError", "checked", "create", "upgrade"]


class NoStoreError(StoreError):
    """A read-only store's file does not exist."""


def create(connection: sqlite3.Connection, path: Path) -> None:
    """Make a writable store's tables, upgrading an older schema in place, in one transaction.

    Raises:
        StoreError: The file holds a schema this converge does not read; nothing changed
            and `connection` is closed.
    """
    connection.execute("BEGIN IMMEDIATE")
    try:
        connection.execute(
            "CREATE TABLE IF NOT EXISTS converge_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
        )
        connection.execute(
            "CREATE TABLE IF NOT EXISTS converge_runs (" + RUN_COLUMNS.format(time="TEXT") + ")"
        )
        connection.execute(
            "CREATE INDEX IF NOT EXISTS converge_runs_saved_at ON converge_runs (saved_at)"
        )
        connection.execute(JOURNAL_TABLE)
        connection.execute(GATES_TABLE)
        version = upgrade(connection)
        if version != SCHEMA_VERSION:  # rolled back below: nothing changed
            raise StoreError(
                f"{path} has schema version {version}; this converge reads "
                f"version {SCHEMA_VERSION}{newer(version)}"
            )
        for statement in (*INDEXES.values(), COUNTS_INDEX):
            connection.execute(statement)
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        connection.close()
        raise


def checked(connection: sqlite3.Connection, path: Path) -> sqlite3.Connection:
    """`connection`, once it reads a converge store of this schema version (else closed)."""
    import sqlite3

    try:
        row = connection.execute(
            "SELECT value FROM converge_meta WHERE key = 'schema_version'"
        ).fetchone()
    except sqlite3.OperationalError as error:
        if error.sqlite_errorname != "SQLITE_ERROR":  # e.g. SQLITE_CANTOPEN
            connection.close()
            raise
        (tables,) = connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
        connection.close()
        if tables == 0:  # being created by a writer right now: no runs yet
            raise NoStoreError(f"no store at {path} yet") from None
        raise StoreError(f"{path} is not a converge store ({error})") from None
    except sqlite3.DatabaseError as error:
        connection.close()
        raise StoreError(f"{path} is not a converge store ({error})") from None
    version = None if row is None else int(str(row[0]))
    if version != SCHEMA_VERSION:
        connection.close()
        upgrade = " (read-only: opening it for writing upgrades it)" if version in UPGRADES else ""
        raise StoreError(
            f"{path} has schema version {version}; this converge reads version "
            f"{SCHEMA_VERSION}{upgrade}{newer(version)}"
        )
    return connection


def upgrade(connection: sqlite3.Connection) -> int:
    """Bring the schema up to `SCHEMA_VERSION` in place (inside the caller's transaction)."""
    connection.execute(
        "INSERT OR IGNORE INTO converge_meta VALUES ('schema_version', ?)",
        (str(SCHEMA_VERSION),),
    )
    (text,) = connection.execute(
        "SELECT value FROM converge_meta WHERE key = 'schema_version'"
    ).fetchone()
    version = int(text)
    while version in UPGRADES and version < SCHEMA_VERSION:
        for statement in UPGRADES[version]:
            connection.execute(statement)
        if version == 3:
            rows = connection.execute(RECOUNT_SELECT).fetchall()
            connection.executemany(RECOUNT_UPDATE, recounted(rows))
        if version == 4:
            updates, gates = reindexed(connection.execute(INDEX_SELECT).fetchall())
            connection.executemany(INDEX_UPDATE, updates)
            connection.executemany(GATE_INSERT, gates)
        if version == 7 and counts_missing(connection.execute(JOURNAL_COLUMNS).description):
            connection.execute(ADD_COUNTS)
        version += 1
        connection.execute(
            "UPDATE converge_meta SET value = ? WHERE key = 'schema_version'", (str(version),)
        )
    return version
