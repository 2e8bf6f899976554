"""The tables of a PostgreSQL store: made, upgraded in place, and checked before a read.

A writable store makes its tables on its first connection and brings an older schema up to
`SCHEMA_VERSION` in the same transaction, one process at a time (`create`, `upgrade`); a
read-only store changes nothing and only checks that the database holds converge tables of
this schema version (`read_only`), or none (`NoTablesError`: no runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core._exceptions import StoreError
from .._core._store import SCHEMA_VERSION
from ._conversions import recounted, reindexed
from ._sql import (
    ADD_COUNTS,
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
    import psycopg

__all__ = ["NoTablesError", "create", "read_only", "upgrade"]


class NoTablesError(StoreError):
    """A read-only store's database has no converge tables."""


def create(connection: psycopg.Connection[tuple[object, ...]]) -> None:
    """Make a writable store's tables, upgrading an older schema in place, in one transaction.

    One store at a time does it (an advisory lock), and only the missing indexes are made.

    Raises:
        StoreError: The database holds a schema this converge does not read; nothing changed
            and `connection` is closed.
    """
    try:
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(7402061)")
            connection.execute(
                "CREATE TABLE IF NOT EXISTS converge_meta "
                "(key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            connection.execute(
                "CREATE TABLE IF NOT EXISTS converge_runs ("
                + RUN_COLUMNS.format(time="TIMESTAMPTZ")
                + ")"
            )
            connection.execute(JOURNAL_TABLE)
            connection.execute(GATES_TABLE)
            version = upgrade(connection)
            if version != SCHEMA_VERSION:  # rolled back: nothing changed
                raise StoreError(
                    f"the database has schema version {version}; this converge reads "
                    f"version {SCHEMA_VERSION}{newer(version)}"
                )
            # Only the missing ones: CREATE INDEX takes a SHARE lock on the table
            # even when the index exists, and would queue behind (and then ahead of)
            # any open write transaction of another process.
            made = {
                str(row[0])
                for row in connection.execute(
                    "SELECT indexname FROM pg_indexes WHERE tablename = 'converge_runs'"
                ).fetchall()
            }
            for name, statement in INDEXES.items():
                if name not in made:
                    connection.execute(statement)
    except BaseException:
        connection.close()
        raise


def read_only(
    connection: psycopg.Connection[tuple[object, ...]],
) -> psycopg.Connection[tuple[object, ...]]:
    """`connection`, its transactions made read-only, once it reads a store of this schema.

    Raises:
        NoTablesError: The database has no converge tables (closed).
        StoreError: It has another schema version (closed).
    """
    import psycopg

    try:
        connection.execute("SET default_transaction_read_only = on")
        row = connection.execute(
            "SELECT value FROM converge_meta WHERE key = 'schema_version'"
        ).fetchone()
    except psycopg.errors.UndefinedTable:
        connection.close()
        raise NoTablesError("the PostgreSQL store has no converge tables") from None
    except BaseException:
        connection.close()
        raise
    version = None if row is None else int(str(row[0]))
    if version != SCHEMA_VERSION:
        connection.close()
        upgrade = " (read-only: opening it for writing upgrades it)" if version in UPGRADES else ""
        raise StoreError(
            f"the database has schema version {version}; this converge reads version "
            f"{SCHEMA_VERSION}{upgrade}{newer(version)}"
        )
    return connection


def upgrade(connection: psycopg.Connection[tuple[object, ...]]) -> int:
    """Bring the schema up to `SCHEMA_VERSION` in place (inside the caller's transaction)."""
    connection.execute(
        "INSERT INTO converge_meta VALUES ('schema_version', %s) ON CONFLICT (key) DO NOTHING",
        (str(SCHEMA_VERSION),),
    )
    row = connection.execute(
        "SELECT value FROM converge_meta WHERE key = 'schema_version'"
    ).fetchone()
    version = 0 if row is None else int(str(row[0]))
    while version in UPGRADES and version < SCHEMA_VERSION:
        for statement in UPGRADES[version]:
            connection.execute(statement)
        if version == 3:
            rows = connection.execute(RECOUNT_SELECT).fetchall()
            with connection.cursor() as cursor:
                cursor.executemany(RECOUNT_UPDATE.replace("?", "%s"), recounted(rows))
        if version == 4:
            updates, gates = reindexed(connection.execute(INDEX_SELECT).fetchall())
            with connection.cursor() as cursor:
                cursor.executemany(INDEX_UPDATE.replace("?", "%s"), updates)
                cursor.executemany(GATE_INSERT.replace("?", "%s"), gates)
        if version == 7 and counts_missing(connection.execute(JOURNAL_COLUMNS).description):
            connection.execute(ADD_COUNTS)
        version += 1
        connection.execute(
            "UPDATE converge_meta SET value = %s WHERE key = 'schema_version'", (str(version),)
        )
    return version
