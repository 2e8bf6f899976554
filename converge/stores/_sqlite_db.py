"""A SQLite connection as the operations the backends share use it.

`SqliteDb` runs `_db`'s statements as they are written (with `?` placeholders), and
`lower` is the SQL function a store registers so that a search ignores the case of any
letter, as PostgreSQL's does; `stored_time` writes a time as `saved_at` holds it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, LiteralString, final

if TYPE_CHECKING:
    import sqlite3

__all__ = ["SqliteDb", "lower", "stored_time"]


def lower(text: str | None) -> str | None:
    """`text` in lower case as Python has it, for any letter (SQLite's `lower`: ASCII only)."""
    return None if text is None else str(text).lower()


@final
class SqliteDb:
    """A SQLite connection as the shared operations use it."""

    __slots__ = ("_connection", "written")

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection
        self.written = 0
        """The length of the texts and blobs given to `one` and `run`: roughly what a write
        transaction adds to the log (`_sqlite_wal.Logged`)."""

    def one(
        self, statement: LiteralString, values: tuple[object, ...], /
    ) -> tuple[object, ...] | None:
        self.written += _length(values)
        row = self._connection.execute(statement, values).fetchone()
        return None if row is None else tuple(row)

    def all(
        self, statement: LiteralString, values: tuple[object, ...], /
    ) -> list[tuple[object, ...]]:
        return [tuple(row) for row in self._connection.execute(statement, values).fetchall()]

    def run(self, statement: LiteralString, values: tuple[object, ...], /) -> None:
        self.written += _length(values)
        self._connection.execute(statement, values)


def _length(values: tuple[object, ...]) -> int:
    return sum(len(value) for value in values if isinstance(value, str | bytes))


def stored_time(moment: datetime) -> str:
    """`moment` as `saved_at` is stored: ISO 8601 text in UTC."""
    return moment.astimezone(UTC).isoformat()
