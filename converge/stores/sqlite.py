"""`SqliteRunStore`: the embedded store, one SQLite file in WAL mode.

The standard library's `sqlite3` is imported on the first connection, not with this module,
so importing converge does not load it. Every call opens its own connection in an anyio
worker thread, and every save is one transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, final

import anyio.to_thread

from .._checkpoint import Checkpoint
from .._exceptions import RunNotFoundError, StaleRecordError, StoreError
from .._store import SCHEMA_VERSION, RunRecord, RunSummary
from ._sql import COLUMNS, INSERT, UPDATE, UPGRADES, UPSERT, record_from, to_row, to_summary

if TYPE_CHECKING:
    import sqlite3

__all__ = ["SqliteRunStore"]

T = TypeVar("T")


@final
class SqliteRunStore:
    """The embedded store: one SQLite file in WAL mode, safe for concurrent writers.

    Args:
        path: The database file; its folder is created if needed.
        clock: Returns the aware `datetime` recorded as `saved_at` (default: now in UTC).
    """

    def __init__(self, path: str | Path, *, clock: Callable[[], datetime] | None = None) -> None:
        self._path = Path(path)
        self._clock = clock or (lambda: datetime.now(UTC))
        self._ready = False

    def __repr__(self) -> str:
        return f"SqliteRunStore({str(self._path)!r})"

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def _connect(self) -> sqlite3.Connection:
        import sqlite3

        if not self._ready:
            self._path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self._path, timeout=30.0, isolation_level=None)
        connection.execute("PRAGMA busy_timeout = 30000")
        if not self._ready:
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("BEGIN IMMEDIATE")
            try:
                connection.execute(
                    "CREATE TABLE IF NOT EXISTS converge_meta "
                    "(key TEXT PRIMARY KEY, value TEXT NOT NULL)"
                )
                connection.execute(
                    "CREATE TABLE IF NOT EXISTS converge_runs (run_id TEXT PRIMARY KEY, "
                    "stop_reason TEXT NOT NULL, detail TEXT NOT NULL, cycles INTEGER NOT NULL, "
                    "fact_count INTEGER NOT NULL, merkle_root TEXT NOT NULL, "
                    "saved_at TEXT NOT NULL, name TEXT, record TEXT NOT NULL, checkpoint TEXT, "
                    "version INTEGER NOT NULL DEFAULT 1)"
                )
                connection.execute(
                    "CREATE INDEX IF NOT EXISTS converge_runs_saved_at ON converge_runs (saved_at)"
                )
                version = upgrade(connection)
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                connection.close()
                raise
            if int(version) != SCHEMA_VERSION:
                connection.close()
                raise StoreError(
                    f"{self._path} has schema version {version}; this converge reads "
                    f"version {SCHEMA_VERSION}"
                )
            self._ready = True
        connection.execute("PRAGMA synchronous = NORMAL")
        return connection

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def task() -> T:
            connection = self._connect()
            try:
                return work(connection)
            finally:
                connection.close()

        return await anyio.to_thread.run_sync(task)

    async def save(self, record: RunRecord, /, *, expected_version: int | None = None) -> int:
        """Save the record in one transaction; return its new version.

        `expected_version=None` inserts or replaces whatever is stored; `0` inserts a run
        that must not exist yet; `k` replaces the run only if it is still at version `k`.

        Raises:
            StaleRecordError: The run is not at `expected_version`; nothing was saved.
        """
        row = to_row(record, self._clock().isoformat())

        def work(connection: sqlite3.Connection) -> int:
            connection.execute("BEGIN IMMEDIATE")
            try:
                version = _write(connection, record.run_id, row, expected_version)
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            return version

        return await self._run(work)

    async def load(self, run_id: str, /) -> RunRecord:
        """The stored record, with its `version`.

        Raises:
            RunNotFoundError: No run has this id.
            StoreError: The stored record is invalid or belongs to another run.
        """

        def work(connection: sqlite3.Connection) -> tuple[object, ...] | None:
            row = connection.execute(
                "SELECT record, version FROM converge_runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            return None if row is None else tuple(row)

        row = await self._run(work)
        if row is None:
            raise RunNotFoundError(f"no run {run_id!r} in {self._path}")
        return record_from(run_id, str(row[0]), int(str(row[1])))

    async def list_runs(self, *, limit: int = 50) -> tuple[RunSummary, ...]:
        """The most recently saved runs first."""

        def work(connection: sqlite3.Connection) -> list[tuple[object, ...]]:
            cursor = connection.execute(
                f"SELECT {COLUMNS} FROM converge_runs ORDER BY saved_at DESC, run_id LIMIT ?",
                (limit,),
            )
            return [tuple(row) for row in cursor.fetchall()]

        return tuple(to_summary(row) for row in await self._run(work))

    async def load_checkpoint(self, run_id: str, /) -> Checkpoint | None:
        """The pending checkpoint of a paused run, or `None`.

        Raises:
            RunNotFoundError: No run has this id.
        """

        def work(connection: sqlite3.Connection) -> tuple[object, ...] | None:
            row = connection.execute(
                "SELECT checkpoint FROM converge_runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            return None if row is None else tuple(row)

        row = await self._run(work)
        if row is None:
            raise RunNotFoundError(f"no run {run_id!r} in {self._path}")
        text = row[0]
        return None if text is None else Checkpoint.model_validate_json(str(text))


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
        version += 1
        connection.execute(
            "UPDATE converge_meta SET value = ? WHERE key = 'schema_version'", (str(version),)
        )
    return version


def _write(
    connection: sqlite3.Connection,
    run_id: str,
    row: tuple[object, ...],
    expected: int | None,
) -> int:
    if expected is None:
        written = connection.execute(UPSERT, row).fetchone()
    elif expected == 0:
        written = connection.execute(INSERT, row).fetchone()
    else:
        written = connection.execute(UPDATE, (*row, run_id, expected)).fetchone()
    if written is None:
        current = connection.execute(
            "SELECT version FROM converge_runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        raise StaleRecordError(run_id, expected or 0, None if current is None else current[0])
    return int(written[0])
