"""Where the stores keep relayed text (`TokenRelay`).

A side file beside a SQLite store, an UNLOGGED table in PostgreSQL. Neither is part of any
run's record, and neither needs to outlive a crash: it is only the text of calls running now.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from .._core._live_text import STALE_SECONDS, LiveText

if TYPE_CHECKING:
    import sqlite3

    import psycopg

__all__ = ["pg_drop", "pg_put", "pg_read", "side_drop", "side_file", "side_put", "side_read"]

_COLUMNS: Final = (
    "run_id TEXT NOT NULL, suggestor TEXT NOT NULL, call INTEGER NOT NULL, "
    "attempt INTEGER NOT NULL, cycle INTEGER NOT NULL, text TEXT NOT NULL, "
    "cut BOOLEAN NOT NULL, updated DOUBLE PRECISION NOT NULL, "
    "PRIMARY KEY (run_id, suggestor, call)"
)
_READ: Final = (
    "SELECT cycle, suggestor, call, attempt, text, cut FROM {table} "
    "WHERE run_id = {p} AND updated > {p} ORDER BY suggestor, call"
)
_PUT: Final = (
    "INSERT INTO {table} (run_id, suggestor, call, attempt, cycle, text, cut, updated) "
    "VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}) "
    "ON CONFLICT (run_id, suggestor, call) DO UPDATE SET attempt = excluded.attempt, "
    "cycle = excluded.cycle, text = excluded.text, cut = excluded.cut, "
    "updated = excluded.updated"
)


def _rows(texts: Sequence[LiveText], run_id: str, now: float) -> list[tuple[object, ...]]:
    return [(run_id, t.suggestor, t.call, t.attempt, t.cycle, t.text, t.cut, now) for t in texts]


def _texts(rows: Sequence[tuple[object, ...]]) -> tuple[LiveText, ...]:
    return tuple(
        LiveText(
            cycle=int(str(cycle)),
            suggestor=str(suggestor),
            call=int(str(call)),
            attempt=int(str(attempt)),
            text=str(text),
            cut=bool(cut),
        )
        for cycle, suggestor, call, attempt, text, cut in rows
    )


def side_file(path: Path) -> Path:
    """The side file of the SQLite store at `path`."""
    return path.with_name(f"{path.name}-live")


def _side(path: Path) -> sqlite3.Connection:
    import sqlite3

    connection = sqlite3.connect(side_file(path), timeout=5.0, isolation_level=None)
    try:
        connection.execute(f"CREATE TABLE IF NOT EXISTS live_text ({_COLUMNS})")
    except BaseException:
        connection.close()
        raise
    return connection


def side_put(path: Path, run_id: str, texts: Sequence[LiveText], now: float) -> None:
    """Write `texts` of `run_id` to the side file of the store at `path`; delete stale text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = _side(path)
    try:
        with connection:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("DELETE FROM live_text WHERE updated <= ?", (now - STALE_SECONDS,))
            connection.executemany(_PUT.format(table="live_text", p="?"), _rows(texts, run_id, now))
    finally:
        connection.close()


def side_drop(path: Path, run_id: str) -> None:
    """Delete the text of `run_id` from the side file (if there is one)."""
    if not side_file(path).exists():
        return
    connection = _side(path)
    try:
        connection.execute("DELETE FROM live_text WHERE run_id = ?", (run_id,))
    finally:
        connection.close()


def side_read(path: Path, run_id: str, now: float) -> tuple[LiveText, ...]:
    """The text of `run_id` in the side file (none if there is no side file); never writes."""
    import sqlite3

    file = side_file(path)
    if not file.exists():
        return ()
    connection = sqlite3.connect(f"{file.absolute().as_uri()}?mode=ro", uri=True, timeout=5.0)
    try:
        rows = connection.execute(
            _READ.format(table="live_text", p="?"), (run_id, now - STALE_SECONDS)
        ).fetchall()
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):
            return ()
        raise
    finally:
        connection.close()
    return _texts(rows)


_TABLE: Final = "converge_live_text"


def pg_put(
    connection: psycopg.Connection[tuple[object, ...]],
    run_id: str,
    texts: Sequence[LiveText],
    now: float,
) -> None:
    """Write `texts` of `run_id` to the UNLOGGED table (made on first use); delete stale text."""
    with connection.transaction():
        if connection.execute("SELECT to_regclass(%s)", (_TABLE,)).fetchone() == (None,):
            connection.execute("SELECT pg_advisory_xact_lock(7402062)")
            connection.execute(f"CREATE UNLOGGED TABLE IF NOT EXISTS {_TABLE} ({_COLUMNS})")
        connection.execute(f"DELETE FROM {_TABLE} WHERE updated <= %s", (now - STALE_SECONDS,))
        with connection.cursor() as cursor:
            cursor.executemany(_PUT.format(table=_TABLE, p="%s"), _rows(texts, run_id, now))


def pg_drop(connection: psycopg.Connection[tuple[object, ...]], run_id: str) -> None:
    """Delete the text of `run_id` (if the table exists)."""
    if connection.execute("SELECT to_regclass(%s)", (_TABLE,)).fetchone() == (None,):
        return
    connection.execute(f"DELETE FROM {_TABLE} WHERE run_id = %s", (run_id,))


def pg_read(
    connection: psycopg.Connection[tuple[object, ...]], run_id: str, now: float
) -> tuple[LiveText, ...]:
    """The text of `run_id` (none if the table was never made)."""
    if connection.execute("SELECT to_regclass(%s)", (_TABLE,)).fetchone() == (None,):
        return ()
    rows = connection.execute(
        _READ.format(table=_TABLE, p="%s"), (run_id, now - STALE_SECONDS)
    ).fetchall()
    return _texts(rows)
