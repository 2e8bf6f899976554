"""`PostgresRunStore`: a PostgreSQL store for many writers (extra `postgres`, psycopg 3).

psycopg is imported when a store is built or connects, never with this module, so importing
converge does not need it. Its synchronous API runs in anyio worker threads, so the store
works under asyncio and trio alike, and across event loops. A store opens one connection
on first use and reuses it (calls run one at a time), reconnecting if it broke. A read-only
store runs every transaction read-only and never creates or upgrades the tables, so a role
that may only `SELECT` can read the runs.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar, final

import anyio.to_thread

from .._core._checkpoint import Checkpoint
from .._core._exceptions import RunNotFoundError, StoreError
from .._core._listing import PendingGate, RunSummary
from .._core._live_text import LiveText
from .._core._progress import RunProgress
from .._core._record import RunRecord
from .._core._record_head import RecordHead, RunFinal
from .._core._stop import RunStatus, StopReason
from ._db import (
    delete_run,
    entry_counts,
    journal_page,
    list_gates,
    list_runs,
    load_head,
    load_record,
    prune_runs,
    renew_lease,
    write_final,
    write_progress,
    write_record,
)
from ._live_rows import pg_drop, pg_put, pg_read
from ._postgres_db import PostgresDb
from ._postgres_schema import NoTablesError, create, read_only
from ._sql import RunFilter

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
            '(pip install "converge-engine[postgres]")'
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
        read_only: Only read: every transaction is read-only (`default_transaction_read_only`),
            the tables are never created or upgraded, and `save`, `save_progress` and
            `renew_lease` raise `StoreError`. A database without the tables has no runs:
            `list_runs` finds none, `load` and `load_checkpoint` raise `RunNotFoundError`.
    """

    def __init__(
        self, dsn: str, *, clock: Callable[[], datetime] | None = None, read_only: bool = False
    ) -> None:
        _psycopg()
        self._dsn = dsn
        self._clock = clock or (lambda: datetime.now(UTC))
        self._read_only = read_only
        self._ready = False
        self._connection: psycopg.Connection[tuple[object, ...]] | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            "PostgresRunStore(..., read_only=True)" if self._read_only else "PostgresRunStore(...)"
        )

    @property
    def read_only(self) -> bool:
        """Whether the store only reads (see the class)."""
        return self._read_only

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        import psycopg

        connection: psycopg.Connection[tuple[object, ...]] = psycopg.connect(
            self._dsn, autocommit=True
        )
        if self._read_only:
            return read_only(connection)
        if not self._ready:
            create(connection)
            self._ready = True
        return connection

    async def _run(self, work: Callable[[psycopg.Connection[tuple[object, ...]]], T]) -> T:
        def task() -> T:
            with self._lock:
                connection = self._connection
                if connection is None or connection.closed or connection.broken:
                    if connection is not None:
                        connection.close()
                    connection = self._connection = self._connect()
                    # Closed when the store goes, before the connection's own finaliser
                    # could warn (garbage cycles included), or at interpreter exit.
                    weakref.finalize(self, connection.close)
                return work(connection)

        return await anyio.to_thread.run_sync(task)

    async def _transaction(self, work: Callable[[PostgresDb], T], *, read: bool = False) -> T:
        """`work` in one transaction: one consistent snapshot when `read`.

        Writes run at read committed, so a concurrent save makes a versioned write find no
        row (`StaleRecordError`), never a serialization failure.
        """

        def task(connection: psycopg.Connection[tuple[object, ...]]) -> T:
            with connection.transaction():
                if read:
                    connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                return work(PostgresDb(connection))

        return await self._run(task)

    def close(self) -> None:
        """Close the store's connection (the next call opens a new one)."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def _writable(self, run_id: str) -> None:
        if self._read_only:
            what = f"run {run_id} not saved" if run_id else "nothing changed"
            raise StoreError(f"the PostgreSQL store is open read-only; {what}")

    async def save(self, record: RunRecord, /, *, expected_version: int | None = None) -> int:
        """Save the record in one transaction (dropping its journal); return its new version.

        `expected_version=None` inserts or replaces whatever is stored; `0` inserts a run
        that must not exist yet; `k` replaces the run only if it is still at version `k`.

        Raises:
            StaleRecordError: The run is not at `expected_version`; nothing was saved.
            StoreError: The store is read-only; nothing was saved.
        """
        self._writable(record.run_id)
        saved_at = self._clock()
        return await self._transaction(
            lambda db: write_record(db, record, saved_at, expected_version)
        )

    async def save_progress(self, progress: RunProgress, /, *, expected_version: int) -> int:
        """Save one cycle of a running run in one transaction; return its new version.

        Raises:
            StaleRecordError: The run is not at `expected_version`; nothing was saved.
            StoreError: The store is read-only; nothing was saved.
        """
        self._writable(progress.head.run_id)
        now = self._clock()
        return await self._transaction(
            lambda db: write_progress(db, progress, now, now, expected_version)
        )

    async def save_final(self, final: RunFinal, /, *, expected_version: int) -> int:
        """Save the end of a run stored as rows in one transaction; return its new version.

        Raises:
            StaleRecordError: The run is not at `expected_version`; nothing was saved.
            StoreError: The store is read-only; nothing was saved.
        """
        run_id = final.head.record.run_id
        self._writable(run_id)
        saved_at = self._clock()
        return await self._transaction(
            lambda db: write_final(db, final, saved_at, expected_version)
        )

    async def renew_lease(self, run_id: str, /, *, version: int, lease_seconds: float) -> None:
        """Extend a running run's lease, keeping its version.

        Raises:
            StaleRecordError: The run is no longer running at `version`.
            StoreError: The store is read-only.
        """
        self._writable(run_id)
        now = self._clock()
        await self._transaction(lambda db: renew_lease(db, run_id, version, now, lease_seconds))

    async def load(self, run_id: str, /) -> RunRecord:
        """The stored record, with its `version` and `status`.

        Raises:
            RunNotFoundError: No run has this id.
            StoreError: The stored record is invalid or belongs to another run.
        """
        now = self._clock()
        try:
            return await self._transaction(
                lambda db: load_record(db, run_id, now, "the PostgreSQL store"), read=True
            )
        except NoTablesError:
            raise RunNotFoundError(f"no run {run_id!r} in the PostgreSQL store") from None

    async def load_head(self, run_id: str, /, *, paused: bool = False) -> RecordHead | None:
        """The head of a finished (or, with `paused`, paused) run stored as rows, or `None`.

        Its `record.version` is the row's.

        Raises:
            RunNotFoundError: No run has this id.
            StoreError: The stored head is invalid or belongs to another run.
        """
        try:
            return await self._transaction(
                lambda db: load_head(db, run_id, "the PostgreSQL store", paused=paused), read=True
            )
        except NoTablesError:
            raise RunNotFoundError(f"no run {run_id!r} in the PostgreSQL store") from None

    async def journal(
        self, run_id: str, /, *, after: int = 0, limit: int = 16
    ) -> list[tuple[int, str]]:
        """Up to `limit` of the run's journal entries after `after`, as `(seq, entry)`.

        In order: the rows of a finished run stored as rows (none for an unknown run).
        """
        try:
            return await self._transaction(
                lambda db: journal_page(db, run_id, after, limit), read=True
            )
        except NoTablesError:
            return []

    async def entry_counts(self, run_id: str, /) -> list[tuple[int, str | None]]:
        """`(seq, counts)` of each of the run's journal entries, in order (see `RowStore`)."""
        try:
            return await self._transaction(lambda db: entry_counts(db, run_id), read=True)
        except NoTablesError:
            return []

    async def list_runs(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        status: RunStatus | StopReason | None = None,
        formation: str | None = None,
        pending: bool | None = None,
        since: datetime | None = None,
        search: str | None = None,
    ) -> tuple[RunSummary, ...]:
        """One page of the runs the filters take, the most recently saved first.

        Selected by the store's query; the filters as `SqliteRunStore.list_runs` takes them.
        """
        selected = RunFilter(
            status=status, formation=formation, pending=pending, since=since, search=search
        )
        now = self._clock()
        try:
            return tuple(
                await self._transaction(
                    lambda db: list_runs(db, selected, now, limit=limit, offset=offset),
                    read=True,
                )
            )
        except NoTablesError:  # a read-only store of a database without its tables
            return ()

    async def pending_gates(self, *, limit: int = 50, offset: int = 0) -> tuple[PendingGate, ...]:
        """One page of the gates every paused run waits on, the longest waiting first."""
        try:
            return tuple(
                await self._transaction(
                    lambda db: list_gates(db, limit=limit, offset=offset), read=True
                )
            )
        except NoTablesError:
            return ()

    async def delete(self, run_id: str, /, *, force: bool = False) -> None:
        """Delete a run with its journal and gates in one transaction (as SQLite's)."""
        self._writable(run_id)
        now = self._clock()
        await self._transaction(
            lambda db: delete_run(db, run_id, now, force=force, place="the PostgreSQL store")
        )

    async def prune(
        self,
        *,
        older_than: datetime,
        status: RunStatus | StopReason | None = None,
        formation: str | None = None,
        paused: bool = False,
        dry_run: bool = False,
    ) -> tuple[str, ...]:
        """Delete every run last saved before `older_than` and its rows in one transaction.

        As `SqliteRunStore.prune` does; the ids deleted, oldest first.
        """
        self._writable("")
        selected = RunFilter(status=status, formation=formation, before=older_than)
        now = self._clock()
        return tuple(
            await self._transaction(
                lambda db: prune_runs(db, selected, now, paused=paused, dry_run=dry_run),
                read=dry_run,
            )
        )

    async def vacuum(self) -> None:
        """Give the space of deleted runs back (PostgreSQL's `VACUUM` of the tables)."""
        self._writable("")

        def work(connection: psycopg.Connection[tuple[object, ...]]) -> None:
            for table in ("converge_runs", "converge_journal", "converge_gates"):
                connection.execute(f"VACUUM {table}")

        await self._run(work)

    async def put_live_text(self, run_id: str, texts: Sequence[LiveText], /) -> None:
        """Write the text of running calls of `run_id` to `converge_live_text` (UNLOGGED)."""
        self._writable(run_id)
        now = time.time()
        await self._run(lambda connection: pg_put(connection, run_id, texts, now))

    async def drop_live_text(self, run_id: str, /) -> None:
        """Delete the text of `run_id` from `converge_live_text`."""
        await self._run(lambda connection: pg_drop(connection, run_id))

    async def live_text(self, run_id: str, /) -> tuple[LiveText, ...]:
        """The text of `run_id`'s running calls (see `TokenRelay`)."""
        now = time.time()
        return await self._run(lambda connection: pg_read(connection, run_id, now))

    async def load_checkpoint(self, run_id: str, /) -> Checkpoint | None:
        """The pending checkpoint of a paused run, or `None`.

        Raises:
            RunNotFoundError: No run has this id.
            StoreError: The stored record is invalid.
        """
        record = await self.load(run_id)
        return record.checkpoint if record.pending else None
