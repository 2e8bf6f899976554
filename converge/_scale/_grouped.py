"""`GroupedSaves`: the saves of many concurrent runs of one process, committed together.

A batch worker runs hundreds of runs at once in one event loop, and each saves after every
cycle: one write transaction per save, all through the worker's one connection, while the
other workers write the same store. On SQLite each transaction takes the file's write lock,
and a worker that finds it taken sleeps in SQLite's busy handler, holding up every save of
its own queued behind; on PostgreSQL each is a commit. `GroupedSaves` wraps a built-in store
and writes the saves that arrive while one transaction is under way in the next one: the
first save finds no transaction and writes alone, the ones behind it go together.

Each save keeps its guarantees: it returns once its transaction committed, with its own new
version, and a save that finds its run at another version raises `StaleRecordError` for that
run alone (nothing of it was written; the others commit). If the grouped transaction fails
as a whole, each of its saves is tried again in a transaction of its own, so that one bad
save fails only itself. Everything else goes straight to the store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, Protocol, TypeVar, final

import anyio

from .._core._checkpoint import Checkpoint
from .._core._exceptions import StaleRecordError
from .._core._listing import RunSummary
from .._core._progress import RunProgress
from .._core._record import RunRecord
from .._core._record_head import RecordHead, RunFinal
from .._core._store import RunStore
from ..stores._db import Db, write_final, write_progress, write_record

if TYPE_CHECKING:
    from datetime import datetime

__all__ = ["GroupedSaves", "grouped"]

_LARGEST: Final = 256
"""Saves in one transaction at most."""

T = TypeVar("T")


class _Transactional(Protocol):
    """What `GroupedSaves` uses of `SqliteRunStore` and `PostgresRunStore`."""

    _clock: Callable[[], datetime]

    async def _transaction(self, work: Callable[[Db], T]) -> T: ...

    async def load_head(self, run_id: str, /, *, paused: bool = False) -> RecordHead | None: ...

    async def journal(
        self, run_id: str, /, *, after: int = 0, limit: int = 16
    ) -> list[tuple[int, str]]: ...

    async def entry_counts(self, run_id: str, /) -> list[tuple[int, str | None]]: ...


Write = Callable[[Db], int]
"""One save's statements, in a transaction: its run's new version."""


@final
class _Pending:
    """A save waiting for its transaction: what to write, and then its outcome."""

    __slots__ = ("done", "error", "version", "write")

    def __init__(self, write: Write) -> None:
        self.write = write
        self.done = anyio.Event()
        self.version = 0
        self.error: Exception | None = None


@final
class GroupedSaves:
    """A built-in store whose concurrent saves are committed together (see the module).

    Args:
        store: A `SqliteRunStore` (not read-only) or a `PostgresRunStore`.
    """

    __slots__ = ("_busy", "_queue", "_store", "_writer")

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self._writer: _Transactional = store  # pyright: ignore[reportAttributeAccessIssue]
        self._queue: list[_Pending] = []
        self._busy = False

    @property
    def store(self) -> RunStore:
        """The store it writes to."""
        return self._store

    async def save(self, record: RunRecord, /, *, expected_version: int | None = None) -> int:
        """`RunStore.save`, committed with the saves waiting beside it."""
        saved_at = self._saved_at()
        return await self._write(lambda db: write_record(db, record, saved_at, expected_version))

    async def save_progress(self, progress: RunProgress, /, *, expected_version: int) -> int:
        """`RunStore.save_progress`, committed with the saves waiting beside it."""
        now = self._writer._clock()  # pyright: ignore[reportPrivateUsage]
        saved_at = now.isoformat() if self._sqlite else now
        return await self._write(
            lambda db: write_progress(db, progress, now, saved_at, expected_version)
        )

    async def save_final(self, final: RunFinal, /, *, expected_version: int) -> int:
        """`RowStore.save_final`, committed with the saves waiting beside it."""
        saved_at = self._saved_at()
        return await self._write(lambda db: write_final(db, final, saved_at, expected_version))

    async def renew_lease(self, run_id: str, /, *, version: int, lease_seconds: float) -> None:
        """`RunStore.renew_lease` (from the lease thread: not grouped)."""
        await self._store.renew_lease(run_id, version=version, lease_seconds=lease_seconds)

    async def load(self, run_id: str, /) -> RunRecord:
        """`RunStore.load`."""
        return await self._store.load(run_id)

    async def load_head(self, run_id: str, /, *, paused: bool = False) -> RecordHead | None:
        """`RowStore.load_head`."""
        return await self._writer.load_head(run_id, paused=paused)

    async def journal(
        self, run_id: str, /, *, after: int = 0, limit: int = 16
    ) -> list[tuple[int, str]]:
        """`RowStore.journal`."""
        return await self._writer.journal(run_id, after=after, limit=limit)

    async def entry_counts(self, run_id: str, /) -> list[tuple[int, str | None]]:
        """`RowStore.entry_counts`."""
        return await self._writer.entry_counts(run_id)

    async def list_runs(self, *, limit: int = 50) -> Sequence[RunSummary]:
        """`RunStore.list_runs`."""
        return await self._store.list_runs(limit=limit)

    async def load_checkpoint(self, run_id: str, /) -> Checkpoint | None:
        """`RunStore.load_checkpoint`."""
        return await self._store.load_checkpoint(run_id)

    @property
    def _sqlite(self) -> bool:
        from ..stores import SqliteRunStore

        return isinstance(self._store, SqliteRunStore)

    def _saved_at(self) -> object:
        now = self._writer._clock()  # pyright: ignore[reportPrivateUsage]
        return now.isoformat() if self._sqlite else now

    async def _write(self, write: Write) -> int:
        pending = _Pending(write)
        self._queue.append(pending)
        if not self._busy:
            self._busy = True
            try:
                while self._queue:
                    group, self._queue = self._queue[:_LARGEST], self._queue[_LARGEST:]
                    await self._commit(group)
            finally:
                self._busy = False
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.version

    async def _commit(self, group: list[_Pending]) -> None:
        """Write `group` in one transaction; each alone if that transaction fails."""
        with anyio.CancelScope(shield=True):  # the saves of other runs ride on it
            try:
                await self._writer._transaction(lambda db: _each(db, group))  # pyright: ignore[reportPrivateUsage]
            except Exception as error:
                if len(group) == 1:
                    group[0].error = error
                else:
                    for pending in group:
                        try:
                            pending.version = await self._writer._transaction(pending.write)  # pyright: ignore[reportPrivateUsage]
                        except Exception as error:
                            pending.error = error
            for pending in group:
                pending.done.set()


def _each(db: Db, group: list[_Pending]) -> None:
    for pending in group:
        try:
            pending.version = pending.write(db)
        except StaleRecordError as error:  # nothing of this save was written
            pending.error = error


def grouped(store: RunStore) -> RunStore:
    """`store` with its saves grouped, when it is a built-in store that writes."""
    from ..stores import PostgresRunStore, SqliteRunStore

    if isinstance(store, PostgresRunStore) or (
        isinstance(store, SqliteRunStore) and not store.read_only
    ):
        return GroupedSaves(store)
    return store
