"""What both backends do with a connection, written once: save, save progress, renew, load.

A backend wraps its connection in a `Db` (`?` placeholders, rows as tuples) and runs these
inside one transaction of its own.
"""

from __future__ import annotations

from datetime import datetime
from typing import LiteralString, Protocol

from .._core._exceptions import RunNotFoundError, StaleRecordError
from .._core._store import RunProgress, RunRecord
from ._sql import (
    DROP_JOURNAL,
    INSERT,
    JOURNAL,
    PROGRESS_INSERT,
    PROGRESS_UPDATE,
    RENEW,
    UPDATE,
    UPSERT,
    lease_until,
    progress_row,
    stored_record,
    to_row,
)

__all__ = ["Db", "load_record", "renew_lease", "write_progress", "write_record"]


class Db(Protocol):
    """A connection inside a transaction, with `?` placeholders."""

    def one(
        self, statement: LiteralString, values: tuple[object, ...], /
    ) -> tuple[object, ...] | None:
        """The first row of `statement`, or `None`."""
        ...

    def all(
        self, statement: LiteralString, values: tuple[object, ...], /
    ) -> list[tuple[object, ...]]:
        """Every row of `statement`."""
        ...

    def run(self, statement: LiteralString, values: tuple[object, ...], /) -> None:
        """Execute `statement`, which returns no rows."""
        ...


def _written(db: Db, run_id: str, row: tuple[object, ...], expected: int | None) -> int:
    """Insert, upsert or update `row` as `expected` says; the new version."""
    if expected is None:
        written = db.one(UPSERT, row)
    elif expected == 0:
        written = db.one(INSERT, row)
    else:
        written = db.one(UPDATE, (*row, run_id, expected))
    if written is None:
        current = db.one("SELECT version FROM converge_runs WHERE run_id = ?", (run_id,))
        now = None if current is None else int(str(current[0]))
        raise StaleRecordError(run_id, expected or 0, now)
    return int(str(written[0]))


def write_record(db: Db, record: RunRecord, saved_at: object, expected: int | None) -> int:
    """Save a finished or paused record (dropping any journal); the new version."""
    version = _written(db, record.run_id, to_row(record, saved_at), expected)
    db.run(DROP_JOURNAL, (record.run_id,))
    return version


def write_progress(
    db: Db, progress: RunProgress, now: datetime, saved_at: object, expected: int
) -> int:
    """Save one cycle of a running run; the new version."""
    head = progress.head
    lease = lease_until(now, progress.lease_seconds).isoformat()
    row = progress_row(progress, saved_at, lease)
    if expected == 0:
        written = db.one(PROGRESS_INSERT, row)
    else:
        written = db.one(PROGRESS_UPDATE, (*row, head.run_id, expected))
    if written is None:
        current = db.one("SELECT version FROM converge_runs WHERE run_id = ?", (head.run_id,))
        raise StaleRecordError(
            head.run_id, expected, None if current is None else int(str(current[0]))
        )
    if progress.restart:
        db.run(DROP_JOURNAL, (head.run_id,))
    if progress.entry is not None:
        db.run(JOURNAL, (head.run_id, head.journal_length, progress.entry))
    return int(str(written[0]))


def renew_lease(db: Db, run_id: str, version: int, now: datetime, seconds: float) -> None:
    """Extend a running run's lease at `version`."""
    lease = lease_until(now, seconds).isoformat()
    if db.one(RENEW, (lease, run_id, version)) is None:
        current = db.one("SELECT version FROM converge_runs WHERE run_id = ?", (run_id,))
        raise StaleRecordError(run_id, version, None if current is None else int(str(current[0])))


def load_record(db: Db, run_id: str, now: datetime, where: str) -> RunRecord:
    """The stored record of `run_id` (assembled from its journal while it runs)."""
    row = db.one(
        "SELECT record, version, status, lease_until FROM converge_runs WHERE run_id = ?",
        (run_id,),
    )
    if row is None:
        raise RunNotFoundError(f"no run {run_id!r} in {where}")
    entries: list[str] = []
    if str(row[2]) in ("running", "interrupted"):
        rows = db.all("SELECT entry FROM converge_journal WHERE run_id = ? ORDER BY seq", (run_id,))
        entries = [str(entry) for (entry,) in rows]
    return stored_record(run_id, row, entries, now)
