"""A psycopg connection as the operations the backends share use it.

`PostgresDb` runs `_db`'s statements, written with `?` placeholders, in psycopg's `%s`
style (`pg`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, LiteralString, final

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresDb", "pg"]


@final
class PostgresDb:
    """A psycopg connection as the shared operations use it (`?` becomes `%s`)."""

    __slots__ = ("_connection",)

    def __init__(self, connection: psycopg.Connection[tuple[object, ...]]) -> None:
        self._connection = connection

    def one(
        self, statement: LiteralString, values: tuple[object, ...], /
    ) -> tuple[object, ...] | None:
        row = self._connection.execute(pg(statement), values).fetchone()
        return None if row is None else tuple(row)

    def all(
        self, statement: LiteralString, values: tuple[object, ...], /
    ) -> list[tuple[object, ...]]:
        return [tuple(row) for row in self._connection.execute(pg(statement), values).fetchall()]

    def run(self, statement: LiteralString, values: tuple[object, ...], /) -> None:
        self._connection.execute(pg(statement), values)


def pg(statement: LiteralString) -> LiteralString:
    """A shared `?`-placeholder statement in psycopg's `%s` style."""
    return statement.replace("?", "%s")
