"""`PostgresRunStore`: a PostgreSQL store for many writers (extra `postgres`, psycopg 3).

psycopg is imported when a store is built or connects, never with this module, so importing
converge does not need it. Its synchronous API runs in anyio worker threads, so the store
works under asyncio and trio alike.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, LiteralString, TypeVar, final

import anyio.to_thread

from .._checkpoint import Checkpoint
from .._exceptions import RunNotFoundError, StaleRecordError, StoreError
from .._store import SCHEMA_VERSION, RunRecord, RunSummary
from ._sql import COLUMNS, INSERT, UPDATE, UPGRADES, UPSERT, record_from, to_row, to_summary

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresRunStore"]

T = TypeVar("T")


def _psycopg() -> object:
    try:
        import psycopg
    except ImportError:
        raise ImportError(
            "PostgresRunStore needs psycopg: install the 'postgres' extra "
            '(pip install "converge[postgres]")'
        ) from None
    return psycopg


@final
class PostgresRunStore:
    """A PostgreSQL store for many writers (extra `postgres`: psycopg 3, imported lazily).

    Calls run psycopg's synchronous API through anyio's threads, so it works under asyncio
    and trio alike.

    Args:
        dsn: A libpq connection string, e.g. `"postgresql://user@127.0.0.1:5432/db"`.
        clock: Returns the aware `datetime` recorded as `saved_at` (default: now in UTC).
    """

    def __init__(self, dsn: str, *, clock: Callable[[], datetime] | None = None) -> None:
        _psycopg()
        self._dsn = dsn
        self._clock = clock or (lambda: datetime.now(UTC))
        self._ready = False

    def __repr__(self) -> str:
        return "PostgresRunStore(...)"

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        import psycopg

        connection: psycopg.Connection[tuple[object, ...]] = psycopg.connect(self._dsn)
        if not self._ready:
            try:
                with connection.transaction():
                    connection.execute("SELECT pg_advisory_xact_lock(7402061)")
                    connection.execute(
                        "CREATE TABLE IF NOT EXISTS converge_meta "
                        "(key TEXT PRIMARY KEY, value TEXT NOT NULL)"
                    )
                    connection.execute(
                        "CREATE TABLE IF NOT EXISTS converge_runs (run_id TEXT PRIMARY KEY, "
                        "stop_reason TEXT NOT NULL, detail TEXT NOT NULL, "
                        "cycles INTEGER NOT NULL, fact_count INTEGER NOT NULL, "
                        "merkle_root TEXT NOT NULL, saved_at TIMESTAMPTZ NOT NULL, "
                        "name TEXT, record TEXT NOT NULL, checkpoint TEXT, "
                        "version INTEGER NOT NULL DEFAULT 1)"
                    )
                    version = _upgrade(connection)
            except BaseException:
                connection.close()
                raise
            if version != SCHEMA_VERSION:
                connection.close()
                raise StoreError(
                    f"the database has schema version {version}; this converge reads "
                    f"version {SCHEMA_VERSION}"
                )
            self._ready = True
        return connection

    async def _run(self, work: Callable[[psycopg.Connection[tuple[object, ...]]], T]) -> T:
        def task() -> T:
            with self._connect() as connection:
                return work(connection)

        return await anyio.to_thread.run_sync(task)

    async def save(self, record: RunRecord, /, *, expected_version: int | None = None) -> int:
        """Save the record in one transaction; return its new version.

        `expected_version=None` inserts or replaces whatever is stored; `0` inserts a run
        that must not exist yet; `k` replaces the run only if it is still at version `k`.

        Raises:
            StaleRecordError: The run is not at `expected_version`; nothing was saved.
        """
        row = to_row(record, self._clock())
        run_id = record.run_id

        def work(connection: psycopg.Connection[tuple[object, ...]]) -> int:
            with connection.transaction():
                if expected_version is None:
                    written = connection.execute(_pg(UPSERT), row).fetchone()
                elif expected_version == 0:
                    written = connection.execute(_pg(INSERT), row).fetchone()
                else:
                    values = (*row, run_id, expected_version)
                    written = connection.execute(_pg(UPDATE), values).fetchone()
                if written is None:
                    current = connection.execute(
                        "SELECT version FROM converge_runs WHERE run_id = %s", (run_id,)
                    ).fetchone()
                    now = None if current is None else int(str(current[0]))
                    raise StaleRecordError(run_id, expected_version or 0, now)
            return int(str(written[0]))

        return await self._run(work)

    async def load(self, run_id: str, /) -> RunRecord:
        """The stored record, with its `version`.

        Raises:
            RunNotFoundError: No run has this id.
            StoreError: The stored record is invalid or belongs to another run.
        """

        def work(connection: psycopg.Connection[tuple[object, ...]]) -> tuple[object, ...] | None:
            row = connection.execute(
                "SELECT record, version FROM converge_runs WHERE run_id = %s", (run_id,)
            ).fetchone()
            return None if row is None else tuple(row)

        row = await self._run(work)
        if row is None:
            raise RunNotFoundError(f"no run {run_id!r} in the PostgreSQL store")
        return record_from(run_id, str(row[0]), int(str(row[1])))

    async def list_runs(self, *, limit: int = 50) -> tuple[RunSummary, ...]:
        """The most recently saved runs first."""

        def work(connection: psycopg.Connection[tuple[object, ...]]) -> list[tuple[object, ...]]:
            cursor = connection.execute(
                f"SELECT {COLUMNS} FROM converge_runs ORDER BY saved_at DESC, run_id LIMIT %s",
                (limit,),
            )
            return [tuple(row) for row in cursor.fetchall()]

        rows = await self._run(work)
        return tuple(
            to_summary(
                (*row[:6], row[6].isoformat() if isinstance(row[6], datetime) else row[6], row[7])
            )
            for row in rows
        )

    async def load_checkpoint(self, run_id: str, /) -> Checkpoint | None:
        """The pending checkpoint of a paused run, or `None`.

        Raises:
            RunNotFoundError: No run has this id.
        """

        def work(
            connection: psycopg.Connection[tuple[object, ...]],
        ) -> tuple[object, ...] | None:
            row = connection.execute(
                "SELECT checkpoint FROM converge_runs WHERE run_id = %s", (run_id,)
            ).fetchone()
            return None if row is None else tuple(row)

        row = await self._run(work)
        if row is None:
            raise RunNotFoundError(f"no run {run_id!r} in the PostgreSQL store")
        text = row[0]
        return None if text is None else Checkpoint.model_validate_json(str(text))


def _pg(statement: LiteralString) -> LiteralString:
    """A shared `?`-placeholder statement in psycopg's `%s` style."""
    return statement.replace("?", "%s")


def _upgrade(connection: psycopg.Connection[tuple[object, ...]]) -> int:
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
        version += 1
        connection.execute(
            "UPDATE converge_meta SET value = %s WHERE key = 'schema_version'", (str(version),)
        )
    return version
