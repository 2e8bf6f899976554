"""Run stores: durable records of finished and paused runs, by run id.

`SqliteRunStore` is the embedded default (standard `sqlite3` in WAL mode, one transaction
per save, called through anyio's thread offloading). `PostgresRunStore` (extra `postgres`,
psycopg 3) serves many writers. Both keep one row per run: searchable columns plus the whole
record as JSON, under a versioned schema.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, TypeVar, final

import anyio.to_thread

from ._checkpoint import Checkpoint, FactRecord
from ._context import ContextSnapshot
from ._exceptions import ConvergeError
from ._fact import Fact, restore
from ._hitl import GateRequest
from ._integrity import IntegrityProof
from ._model import FrozenModel
from ._result import Conflict, ConvergeResult
from ._stop import StopReason
from ._trace import Rejection, RunTrace

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "PostgresRunStore",
    "RunNotFoundError",
    "RunRecord",
    "RunStore",
    "RunSummary",
    "SqliteRunStore",
    "StoreError",
]

SCHEMA_VERSION: Final = 1
T = TypeVar("T")


class StoreError(ConvergeError):
    """A run store could not save or load; `result` holds the run when a save failed."""

    result: ConvergeResult | None
    """The run that could not be saved, so nothing is lost."""

    def __init__(self, message: str, *, result: ConvergeResult | None = None) -> None:
        super().__init__(message)
        self.result = result


class RunNotFoundError(StoreError, KeyError):
    """No run with that id is stored."""

    def __str__(self) -> str:
        return str(self.args[0])


@final
class RunSummary(FrozenModel, frozen=True):
    """One line about a stored run."""

    run_id: str
    """The run's id."""
    stop_reason: StopReason
    """How it ended (so far)."""
    detail: str
    """The stop detail."""
    cycles: int
    """Cycles run."""
    fact_count: int
    """Facts in its context."""
    merkle_root: str
    """Its context's Merkle root."""
    saved_at: datetime
    """When it was last saved (UTC)."""
    name: str | None = None
    """The formation's name, if recorded."""


@final
class RunRecord(FrozenModel, frozen=True):
    """Everything stored about a run: summary, proof, trace, facts, and any checkpoint."""

    run_id: str
    """The run's id."""
    stop_reason: StopReason
    """How it ended."""
    detail: str
    """The stop detail."""
    cycles: int
    """Cycles run."""
    tokens: int
    """Tokens spent."""
    integrity: IntegrityProof
    """The proof over `facts`."""
    trace: RunTrace
    """The run trace."""
    facts: tuple[FactRecord, ...]
    """Every fact, in key then insertion order."""
    rejections: tuple[Rejection, ...] = ()
    """Every refused proposal."""
    pending: tuple[GateRequest, ...] = ()
    """Gates awaiting decisions, for a paused run."""
    checkpoint: Checkpoint | None = None
    """The checkpoint of a paused run."""
    conflict: Conflict | None = None
    """The conflict that stopped it, if one did."""
    name: str | None = None
    """The formation's name, when it came from one."""
    formation: str | None = None
    """Where the formation can be loaded from again (a file path or module name)."""

    @classmethod
    def of(
        cls, result: ConvergeResult, *, name: str | None = None, formation: str | None = None
    ) -> RunRecord:
        """The record of a run's result, optionally naming the formation it came from."""
        return cls(
            name=name,
            formation=formation,
            run_id=result.run_id,
            stop_reason=result.stop_reason,
            detail=result.detail,
            cycles=result.cycles,
            tokens=result.tokens,
            integrity=result.integrity,
            trace=result.trace,
            facts=tuple(FactRecord.of(fact) for fact in result.context.facts()),
            rejections=result.rejections,
            pending=result.pending,
            checkpoint=result.checkpoint,
            conflict=result.conflict,
        )

    def restore_context(self) -> ContextSnapshot:
        """The stored context, every digest and the Merkle root verified.

        Raises:
            StoreError: A fact or the root does not match what was stored.
        """
        facts: list[Fact] = []
        for index, record in enumerate(self.facts):
            try:
                facts.append(restore(record.model_dump()))
            except ValueError as error:
                raise StoreError(f"run {self.run_id}: facts[{index}]: {error}") from None
        last = self.cycles
        snapshot = ContextSnapshot.empty()._extend(facts, last, self.integrity.clock)  # pyright: ignore[reportPrivateUsage]
        if snapshot.merkle_root() != self.integrity.merkle_root:
            raise StoreError(f"run {self.run_id}: stored facts do not match the stored root")
        return snapshot

    def summary(self, saved_at: datetime) -> RunSummary:
        """This record as one line."""
        return RunSummary(
            run_id=self.run_id,
            stop_reason=self.stop_reason,
            detail=self.detail,
            cycles=self.cycles,
            fact_count=self.integrity.fact_count,
            merkle_root=self.integrity.merkle_root,
            saved_at=saved_at,
            name=self.name,
        )


class RunStore(Protocol):
    """Saves and loads runs by id. Any class with these methods qualifies."""

    async def save(self, record: RunRecord, /) -> None:
        """Insert or replace the record of `record.run_id`, atomically."""
        ...

    async def load(self, run_id: str, /) -> RunRecord:
        """The stored record; raises `RunNotFoundError` when there is none."""
        ...

    async def list_runs(self, *, limit: int = 50) -> Sequence[RunSummary]:
        """The most recently saved runs first."""
        ...

    async def load_checkpoint(self, run_id: str, /) -> Checkpoint | None:
        """The pending checkpoint of a paused run, or `None` if it is not paused."""
        ...


_COLUMNS: Final = "run_id, stop_reason, detail, cycles, fact_count, merkle_root, saved_at, name"


def _row(record: RunRecord, saved_at: datetime) -> tuple[object, ...]:
    checkpoint = None if record.checkpoint is None else record.checkpoint.model_dump_json()
    return (
        record.run_id,
        record.stop_reason.value,
        record.detail,
        record.cycles,
        record.integrity.fact_count,
        record.integrity.merkle_root,
        saved_at.isoformat(),
        record.name,
        record.model_dump_json(),
        checkpoint,
    )


def _summary(row: Sequence[object]) -> RunSummary:
    run_id, stop_reason, detail, cycles, fact_count, root, saved_at, name = row
    return RunSummary(
        name=None if name is None else str(name),
        run_id=str(run_id),
        stop_reason=StopReason(str(stop_reason)),
        detail=str(detail),
        cycles=int(str(cycles)),
        fact_count=int(str(fact_count)),
        merkle_root=str(root),
        saved_at=datetime.fromisoformat(str(saved_at)),
    )


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
                    "saved_at TEXT NOT NULL, name TEXT, record TEXT NOT NULL, checkpoint TEXT)"
                )
                connection.execute(
                    "CREATE INDEX IF NOT EXISTS converge_runs_saved_at ON converge_runs (saved_at)"
                )
                connection.execute(
                    "INSERT OR IGNORE INTO converge_meta VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
                (version,) = connection.execute(
                    "SELECT value FROM converge_meta WHERE key = 'schema_version'"
                ).fetchone()
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

    async def save(self, record: RunRecord, /) -> None:
        """Insert or replace the record, in one transaction."""
        row = _row(record, self._clock())

        def work(connection: sqlite3.Connection) -> None:
            connection.execute("BEGIN IMMEDIATE")
            try:
                connection.execute(
                    f"INSERT INTO converge_runs ({_COLUMNS}, record, checkpoint) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET "
                    "stop_reason = excluded.stop_reason, detail = excluded.detail, "
                    "cycles = excluded.cycles, fact_count = excluded.fact_count, "
                    "merkle_root = excluded.merkle_root, saved_at = excluded.saved_at, "
                    "name = excluded.name, record = excluded.record, "
                    "checkpoint = excluded.checkpoint",
                    row,
                )
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise

        await self._run(work)

    async def load(self, run_id: str, /) -> RunRecord:
        """The stored record.

        Raises:
            RunNotFoundError: No run has this id.
        """

        def work(connection: sqlite3.Connection) -> str | None:
            row = connection.execute(
                "SELECT record FROM converge_runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            return None if row is None else str(row[0])

        text = await self._run(work)
        if text is None:
            raise RunNotFoundError(f"no run {run_id!r} in {self._path}")
        return RunRecord.model_validate_json(text)

    async def list_runs(self, *, limit: int = 50) -> tuple[RunSummary, ...]:
        """The most recently saved runs first."""

        def work(connection: sqlite3.Connection) -> list[tuple[object, ...]]:
            cursor = connection.execute(
                f"SELECT {_COLUMNS} FROM converge_runs ORDER BY saved_at DESC, run_id LIMIT ?",
                (limit,),
            )
            return [tuple(row) for row in cursor.fetchall()]

        return tuple(_summary(row) for row in await self._run(work))

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
                        "name TEXT, record TEXT NOT NULL, checkpoint TEXT)"
                    )
                    connection.execute(
                        "INSERT INTO converge_meta VALUES ('schema_version', %s) "
                        "ON CONFLICT (key) DO NOTHING",
                        (str(SCHEMA_VERSION),),
                    )
                    row = connection.execute(
                        "SELECT value FROM converge_meta WHERE key = 'schema_version'"
                    ).fetchone()
            except BaseException:
                connection.close()
                raise
            version = None if row is None else row[0]
            if version != str(SCHEMA_VERSION):
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

    async def save(self, record: RunRecord, /) -> None:
        """Insert or replace the record, in one transaction."""
        saved_at = self._clock()
        run_id, stop, detail, cycles, count, root, _, name, body, checkpoint = _row(
            record, saved_at
        )

        def work(connection: psycopg.Connection[tuple[object, ...]]) -> None:
            with connection.transaction():
                connection.execute(
                    f"INSERT INTO converge_runs ({_COLUMNS}, record, checkpoint) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (run_id) "
                    "DO UPDATE SET stop_reason = EXCLUDED.stop_reason, "
                    "detail = EXCLUDED.detail, cycles = EXCLUDED.cycles, "
                    "fact_count = EXCLUDED.fact_count, merkle_root = EXCLUDED.merkle_root, "
                    "saved_at = EXCLUDED.saved_at, name = EXCLUDED.name, "
                    "record = EXCLUDED.record, checkpoint = EXCLUDED.checkpoint",
                    (run_id, stop, detail, cycles, count, root, saved_at, name, body, checkpoint),
                )

        await self._run(work)

    async def load(self, run_id: str, /) -> RunRecord:
        """The stored record.

        Raises:
            RunNotFoundError: No run has this id.
        """

        def work(connection: psycopg.Connection[tuple[object, ...]]) -> str | None:
            row = connection.execute(
                "SELECT record FROM converge_runs WHERE run_id = %s", (run_id,)
            ).fetchone()
            return None if row is None else str(row[0])

        text = await self._run(work)
        if text is None:
            raise RunNotFoundError(f"no run {run_id!r} in the PostgreSQL store")
        return RunRecord.model_validate_json(text)

    async def list_runs(self, *, limit: int = 50) -> tuple[RunSummary, ...]:
        """The most recently saved runs first."""

        def work(connection: psycopg.Connection[tuple[object, ...]]) -> list[tuple[object, ...]]:
            cursor = connection.execute(
                f"SELECT {_COLUMNS} FROM converge_runs ORDER BY saved_at DESC, run_id LIMIT %s",
                (limit,),
            )
            return [tuple(row) for row in cursor.fetchall()]

        rows = await self._run(work)
        return tuple(
            _summary(
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
