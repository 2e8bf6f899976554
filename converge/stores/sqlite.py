"""`SqliteRunStore`: the embedded store, one SQLite file in WAL mode.

`sqlite3` is imported on the first connection. A store opens one connection and reuses it
(calls run one at a time in anyio worker threads, or on the calling thread in `_by_hand`);
every save is one transaction, its WAL checkpointed off the saves' path (`_sqlite_wal`).
A read-only store opens the file with `mode=ro` (or, when WAL's `-shm` file is missing and
cannot be created and there is no write-ahead log to read, `immutable=1`) and never creates
or writes anything.

A connection keeps writing to the file it opened even once that file is deleted or replaced
at its path, where no other process would ever read it. So every call first checks that the
path still names the file the connection opened (its device and inode, one `os.stat`): a
writable store raises `StoreError` (a save is rolled back, never reported saved), a
read-only store opens the file now at the path.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, LiteralString, TypeVar, final

import anyio.to_thread

from .._core._checkpoint import Checkpoint
from .._core._exceptions import RunNotFoundError, StoreError
from .._core._listing import PendingGate, RunSummary
from .._core._live_text import LiveText
from .._core._progress import RunProgress
from .._core._record import RunRecord
from .._core._record_head import RecordHead, RunFinal
from .._core._stop import RunStatus, StopReason
from ._by_hand import on_caller
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
from ._live_rows import side_drop, side_put, side_read
from ._sql import RunFilter
from ._sqlite_db import SqliteDb, lower, stored_time
from ._sqlite_file import identity, open_read_only, open_uri, open_writable
from ._sqlite_schema import NoStoreError
from ._sqlite_wal import BACKSTOP_PAGES, CHECKPOINTS, Logged, truncate

if TYPE_CHECKING:
    import sqlite3

__all__ = ["SqliteRunStore"]

T = TypeVar("T")


@final
class SqliteRunStore:
    """The embedded store: one SQLite file in WAL mode, safe for concurrent writers.

    Args:
        path: The database file; its folder is created if needed (not when `read_only`).
        clock: Returns the aware `datetime` recorded as `saved_at` (default: now in UTC).
        synchronous: SQLite's `synchronous` setting in WAL mode. `"normal"` (the default)
            keeps every committed save through a crash or `kill -9` of the process; after a
            power loss or OS crash the last saves may be missing, never corrupt. `"full"`
            also keeps them through a power loss, for an fsync per save.
        read_only: Only read an existing store: open the file with SQLite's `mode=ro`,
            or, when the WAL's `-shm` file is missing and cannot be created (a read-only
            folder) and no write-ahead log holds saves, with `immutable=1`; never create the
            folder, the file or the tables, never upgrade the schema; `save` raises
            `StoreError`. On a missing file `list_runs` finds no runs, and `load` and
            `load_checkpoint` raise `RunNotFoundError`.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], datetime] | None = None,
        synchronous: Literal["normal", "full"] = "normal",
        read_only: bool = False,
    ) -> None:
        if synchronous not in ("normal", "full"):
            raise ValueError(f"synchronous must be 'normal' or 'full', got {synchronous!r}")
        self._path = Path(path)
        self._clock = clock or (lambda: datetime.now(UTC))
        self._synchronous: LiteralString = "FULL" if synchronous == "full" else "NORMAL"
        self._read_only = read_only
        self._ready = False
        self._uri: str | None = None
        self._connection: sqlite3.Connection | None = None
        self._file: tuple[int, int] | None = None  # device and inode the connection opened
        self._lock = threading.Lock()
        self._logged = Logged()

    def __repr__(self) -> str:
        flag = ", read_only=True" if self._read_only else ""
        return f"SqliteRunStore({str(self._path)!r}{flag})"

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def read_only(self) -> bool:
        """Whether the store only reads (see the class)."""
        return self._read_only

    def _connect(self) -> sqlite3.Connection:
        if self._read_only:
            return self._connect_read_only()
        connection = open_writable(self._path, first=not self._ready)
        self._ready = True
        connection.execute(f"PRAGMA synchronous = {self._synchronous}")
        connection.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}")  # `_sqlite_wal`
        return connection

    def _connect_read_only(self) -> sqlite3.Connection:
        if self._uri is not None:
            return open_uri(self._uri)
        connection, self._uri = open_read_only(self._path)
        return connection

    async def _run(self, work: Callable[[sqlite3.Connection], T], *, run_id: str = "") -> T:
        def task() -> T:
            with self._lock:
                connection = self._connection
                if connection is not None and identity(self._path) != self._file:
                    self._moved(connection, run_id)
                    connection = None
                if connection is None:
                    connection = self._connection = self._connect()
                    # `lower` as Python has it, so that a search ignores the case of any
                    # letter, as PostgreSQL's does (SQLite's own knows only ASCII)
                    connection.create_function("lower", 1, lower, deterministic=True)
                    self._file = identity(self._path)
                    # Closed when the store goes, before the connection's own finaliser
                    # could warn (garbage cycles included), or at interpreter exit.
                    weakref.finalize(self, connection.close)
                return work(connection)

        return task() if on_caller() else await anyio.to_thread.run_sync(task)

    def _moved(self, connection: sqlite3.Connection, run_id: str) -> None:
        """Act on the file at the path not being the one `connection` opened.

        A read-only store closes `connection` (the next call opens the file now there); a
        writable store refuses to go on.

        Raises:
            StoreError: The store is writable (nothing is written to the file it had open).
        """
        if not self._read_only:
            gone = "deleted" if not self._path.exists() else "replaced"
            saved = f"; run {run_id} not saved" if run_id else ""
            raise StoreError(
                f"the store file {self._path} was {gone} while this process had it open{saved}"
            )
        connection.close()
        self._connection = None
        self._uri = None

    async def _transaction(
        self, work: Callable[[SqliteDb], T], *, write: bool = True, run_id: str = ""
    ) -> T:
        def task(connection: sqlite3.Connection) -> T:
            connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            db = SqliteDb(connection)
            try:
                value = work(db)
                if write and identity(self._path) != self._file:  # gone while we waited
                    self._moved(connection, run_id)
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
            if write and self._file is not None and self._logged.add(db.written):
                CHECKPOINTS.nudge(self._path, self._file)
            return value

        return await self._run(task, run_id=run_id)

    def close(self) -> None:
        """Close the store's connection (the next call opens a new one)."""
        with self._lock:
            if self._connection is not None:
                CHECKPOINTS.forget(self._path)  # no checkpoint opens the file once closed
                self._connection.close()
                self._connection = None
                self._file = None

    def _writable(self, run_id: str) -> None:
        if self._read_only:
            what = f"run {run_id} not saved" if run_id else "nothing changed"
            raise StoreError(f"{self._path} is open read-only; {what}")

    async def save(self, record: RunRecord, /, *, expected_version: int | None = None) -> int:
        """Save the record in one transaction (dropping its journal); return its new version.

        `expected_version=None` inserts or replaces whatever is stored; `0` inserts a run
        that must not exist yet; `k` replaces the run only if it is still at version `k`.

        Raises:
            StaleRecordError: The run is not at `expected_version`; nothing was saved.
            StoreError: The store is read-only; nothing was saved.
        """
        self._writable(record.run_id)
        saved_at = self._clock().isoformat()
        return await self._transaction(
            lambda db: write_record(db, record, saved_at, expected_version), run_id=record.run_id
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
            lambda db: write_progress(db, progress, now, now.isoformat(), expected_version),
            run_id=progress.head.run_id,
        )

    async def save_final(self, final: RunFinal, /, *, expected_version: int) -> int:
        """Save the end of a run stored as rows in one transaction; return its new version.

        Raises:
            StaleRecordError: The run is not at `expected_version`; nothing was saved.
            StoreError: The store is read-only; nothing was saved.
        """
        run_id = final.head.record.run_id
        self._writable(run_id)
        saved_at = self._clock().isoformat()
        return await self._transaction(
            lambda db: write_final(db, final, saved_at, expected_version), run_id=run_id
        )

    async def renew_lease(self, run_id: str, /, *, version: int, lease_seconds: float) -> None:
        """Extend a running run's lease, keeping its version.

        Raises:
            StaleRecordError: The run is no longer running at `version`.
        """
        self._writable(run_id)
        now = self._clock()
        await self._transaction(
            lambda db: renew_lease(db, run_id, version, now, lease_seconds), run_id=run_id
        )

    async def load(self, run_id: str, /) -> RunRecord:
        """The stored record, with its `version` and `status`.

        Raises:
            RunNotFoundError: No run has this id.
            StoreError: The stored record is invalid or belongs to another run.
        """
        now = self._clock()
        try:
            return await self._transaction(
                lambda db: load_record(db, run_id, now, str(self._path)), write=False
            )
        except NoStoreError:  # a read-only store that does not exist has no runs
            raise RunNotFoundError(f"no run {run_id!r} in {self._path}") from None

    async def load_head(self, run_id: str, /, *, paused: bool = False) -> RecordHead | None:
        """The head of a finished (or, with `paused`, paused) run stored as rows, or `None`.

        Its `record.version` is the row's.

        Raises:
            RunNotFoundError: No run has this id.
            StoreError: The stored head is invalid or belongs to another run.
        """
        try:
            return await self._transaction(
                lambda db: load_head(db, run_id, str(self._path), paused=paused), write=False
            )
        except NoStoreError:
            raise RunNotFoundError(f"no run {run_id!r} in {self._path}") from None

    async def journal(
        self, run_id: str, /, *, after: int = 0, limit: int = 16
    ) -> list[tuple[int, str]]:
        """Up to `limit` of the run's journal entries after `after`, as `(seq, entry)`.

        In order: the rows of a finished run stored as rows (none for an unknown run).
        """
        try:
            return await self._transaction(
                lambda db: journal_page(db, run_id, after, limit), write=False
            )
        except NoStoreError:
            return []

    async def entry_counts(self, run_id: str, /) -> list[tuple[int, str | None]]:
        """`(seq, counts)` of each of the run's journal entries, in order (see `RowStore`)."""
        try:
            return await self._transaction(lambda db: entry_counts(db, run_id), write=False)
        except NoStoreError:
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

        Selected by the store's query (none when a read-only store does not exist).

        Args:
            limit: At most this many runs.
            offset: Skip this many first.
            status: A status as it stands now (a running run whose lease ran out is
                `INTERRUPTED`), or a stop reason.
            formation: The formation's name or locator, exactly.
            pending: Only runs waiting on a human gate (`True`), or only the others.
            since: Saved at or after this time.
            search: Text in the run id or the formation's name (any case).
        """
        selected = RunFilter(
            status=status,
            formation=formation,
            pending=pending,
            since=None if since is None else stored_time(since),
            search=search,
        )
        now = self._clock()
        try:
            return tuple(
                await self._transaction(
                    lambda db: list_runs(db, selected, now, limit=limit, offset=offset),
                    write=False,
                )
            )
        except NoStoreError:  # a read-only store that does not exist has no runs
            return ()

    async def pending_gates(self, *, limit: int = 50, offset: int = 0) -> tuple[PendingGate, ...]:
        """One page of the gates every paused run waits on, the longest waiting first."""
        try:
            return tuple(
                await self._transaction(
                    lambda db: list_gates(db, limit=limit, offset=offset), write=False
                )
            )
        except NoStoreError:
            return ()

    async def delete(self, run_id: str, /, *, force: bool = False) -> None:
        """Delete a run with its journal and gates in one transaction.

        Raises:
            RunNotFoundError: No run has this id.
            StoreError: The run is paused or running and `force` is not set, or the store is
                read-only; nothing was deleted.
        """
        self._writable(run_id)
        now = self._clock()
        await self._transaction(
            lambda db: delete_run(db, run_id, now, force=force, place=str(self._path))
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

        Only runs with `status` and of `formation` (name or locator), if given; the ids
        deleted, oldest first. A running run whose lease holds is never deleted; a paused run
        only with `paused`. `dry_run` deletes nothing.

        Raises:
            StoreError: The store is read-only; nothing was deleted.
        """
        self._writable("")
        selected = RunFilter(status=status, formation=formation, before=stored_time(older_than))
        now = self._clock()
        return tuple(
            await self._transaction(
                lambda db: prune_runs(db, selected, now, paused=paused, dry_run=dry_run),
                write=not dry_run,
            )
        )

    async def vacuum(self) -> None:
        """Give the space of deleted runs back to the file system (SQLite's `VACUUM`).

        Raises:
            StoreError: The store is read-only.
        """
        self._writable("")

        def work(connection: sqlite3.Connection) -> None:
            connection.execute("VACUUM")
            truncate(connection)

        await self._run(work)

    async def put_live_text(self, run_id: str, texts: Sequence[LiveText], /) -> None:
        """Write the text of running calls of `run_id` to the side file `PATH-live`."""
        self._writable(run_id)
        now = time.time()
        await anyio.to_thread.run_sync(lambda: side_put(self._path, run_id, texts, now))

    async def drop_live_text(self, run_id: str, /) -> None:
        """Delete the text of `run_id` from the side file."""
        await anyio.to_thread.run_sync(lambda: side_drop(self._path, run_id))

    async def live_text(self, run_id: str, /) -> tuple[LiveText, ...]:
        """The text of `run_id`'s running calls in the side file (see `TokenRelay`)."""
        now = time.time()
        return await anyio.to_thread.run_sync(lambda: side_read(self._path, run_id, now))

    async def load_checkpoint(self, run_id: str, /) -> Checkpoint | None:
        """The pending checkpoint of a paused run, or `None`.

        Raises:
            RunNotFoundError: No run has this id.
            StoreError: The stored record is invalid.
        """
        record = await self.load(run_id)
        return record.checkpoint if record.pending else None
