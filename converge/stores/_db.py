"""What both backends do with a connection, written once: save, save progress, renew, load.

A backend wraps its connection in a `Db` (`?` placeholders, rows as tuples) and runs these
inside one transaction of its own.
"""

from __future__ import annotations

from datetime import datetime
from typing import LiteralString, Protocol

from .._core._exceptions import RunNotFoundError, StaleRecordError, StoreError
from .._core._listing import PendingGate, RunSummary
from .._core._progress import RunProgress
from .._core._record import RunRecord
from .._core._record_head import RecordHead, RunFinal
from .._core._stop import RunStatus
from ._assembly import read_head
from ._conversions import (
    counts_text,
    final_row,
    gate_rows,
    judge,
    lease_until,
    progress_row,
    stored_record,
    to_row,
    to_summary,
)
from ._sql import (
    COLUMNS,
    COUNTS_SELECT,
    DROP_GATES,
    DROP_JOURNAL,
    GATE_INSERT,
    INSERT,
    JOURNAL,
    PROGRESS_INSERT,
    PROGRESS_UPDATE,
    RENEW,
    UPDATE,
    UPSERT,
    RunFilter,
    where,
)

__all__ = [
    "Db",
    "delete_run",
    "entry_counts",
    "journal_page",
    "list_gates",
    "list_runs",
    "load_head",
    "load_record",
    "prune_runs",
    "renew_lease",
    "write_final",
    "write_progress",
    "write_record",
]


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
    db.run(DROP_GATES, (record.run_id,))
    for row in gate_rows(record):
        db.run(GATE_INSERT, row)
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
        db.run(DROP_GATES, (head.run_id,))
    if progress.entry is not None:
        db.run(
            JOURNAL,
            (head.run_id, head.journal_length, progress.entry, counts_text(progress.counts)),
        )
    return int(str(written[0]))


def write_final(db: Db, final: RunFinal, saved_at: object, expected: int) -> int:
    """Save the end of a run stored as rows: its head, its last entry; the new version.

    The journal stays: it holds the run's facts, traces, rejections and decisions.
    """
    head = final.head
    run_id = head.record.run_id
    version = _written(db, run_id, final_row(head, saved_at), expected)
    db.run(DROP_GATES, (run_id,))
    for row in gate_rows(head.record):
        db.run(GATE_INSERT, row)
    if final.entry is not None:
        db.run(JOURNAL, (run_id, head.journal_length, final.entry, counts_text(final.counts)))
    return version


def renew_lease(db: Db, run_id: str, version: int, now: datetime, seconds: float) -> None:
    """Extend a running run's lease at `version`."""
    lease = lease_until(now, seconds).isoformat()
    if db.one(RENEW, (lease, run_id, version)) is None:
        current = db.one("SELECT version FROM converge_runs WHERE run_id = ?", (run_id,))
        raise StaleRecordError(run_id, version, None if current is None else int(str(current[0])))


def load_record(db: Db, run_id: str, now: datetime, where: str) -> RunRecord:
    """The stored record of `run_id` (assembled from its journal while it runs)."""
    row = db.one(
        "SELECT record, version, status, lease_until, layout FROM converge_runs WHERE run_id = ?",
        (run_id,),
    )
    if row is None:
        raise RunNotFoundError(f"no run {run_id!r} in {where}")
    entries: list[str] = []
    if str(row[2]) in ("running", "interrupted") or str(row[4]) == "rows":
        rows = db.all("SELECT entry FROM converge_journal WHERE run_id = ? ORDER BY seq", (run_id,))
        entries = [str(entry) for (entry,) in rows]
    return stored_record(run_id, row, entries, now)


def load_head(db: Db, run_id: str, where: str, *, paused: bool = False) -> RecordHead | None:
    """The head of `run_id`, finished (or, with `paused`, paused) and stored as rows, or `None`.

    Its `record.version` is the row's.
    """
    row = db.one(
        "SELECT record, layout, status, version FROM converge_runs WHERE run_id = ?", (run_id,)
    )
    if row is None:
        raise RunNotFoundError(f"no run {run_id!r} in {where}")
    text, layout, status, version = row
    if str(layout) != "rows" or str(status) not in ("finished", "paused" if paused else ""):
        return None
    head = read_head(str(text), run_id)
    record = head.record.model_copy(update={"version": int(str(version))})
    return head.model_copy(update={"record": record})


def journal_page(db: Db, run_id: str, after: int, limit: int) -> list[tuple[int, str]]:
    """`(seq, entry)` of the run's journal entries after `after`, in order, at most `limit`."""
    rows = db.all(
        "SELECT seq, entry FROM converge_journal WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (run_id, after, limit),
    )
    return [(int(str(seq)), str(entry)) for seq, entry in rows]


def entry_counts(db: Db, run_id: str) -> list[tuple[int, str | None]]:
    """`(seq, counts)` of each of the run's journal entries, in order (`None`: no counts)."""
    rows = db.all(COUNTS_SELECT, (run_id,))
    return [(int(str(seq)), None if counts is None else str(counts)) for seq, counts in rows]


def list_runs(
    db: Db, selected: RunFilter, now: datetime, *, limit: int, offset: int
) -> list[RunSummary]:
    """The runs `selected` takes, the most recently saved first, one page."""
    condition, values = where(selected, now.isoformat())
    rows = db.all(
        f"SELECT {COLUMNS} FROM converge_runs WHERE {condition} "
        "ORDER BY saved_at DESC, run_id LIMIT ? OFFSET ?",
        (*values, limit, offset),
    )
    return [to_summary(row, now) for row in rows]


def list_gates(db: Db, *, limit: int, offset: int) -> list[PendingGate]:
    """The pending gates of every paused run, the longest waiting first, one page."""
    rows = db.all(
        "SELECT g.run_id, g.gate_id, g.cycle, g.ref, g.suggestor, g.summary, g.deadline, "
        "r.saved_at, r.name FROM converge_gates g JOIN converge_runs r ON r.run_id = g.run_id "
        "WHERE r.status = 'paused' ORDER BY r.saved_at, g.run_id, g.seq LIMIT ? OFFSET ?",
        (limit, offset),
    )
    gates: list[PendingGate] = []
    for run_id, gate_id, cycle, ref, suggestor, summary, deadline, saved_at, name in rows:
        gates.append(
            PendingGate(
                run_id=str(run_id),
                gate_id=str(gate_id),
                cycle=int(str(cycle)),
                ref=str(ref),
                suggestor=str(suggestor),
                summary=str(summary),
                deadline=None if deadline is None else datetime.fromisoformat(str(deadline)),
                saved_at=_time(saved_at),
                name=None if name is None else str(name),
            )
        )
    return gates


def _time(value: object) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def _drop(db: Db, run_id: str) -> None:
    """Delete a run's row, journal and gates (inside the caller's transaction)."""
    db.run(DROP_JOURNAL, (run_id,))
    db.run(DROP_GATES, (run_id,))
    db.run("DELETE FROM converge_runs WHERE run_id = ?", (run_id,))


def delete_run(db: Db, run_id: str, now: datetime, *, force: bool, place: str) -> None:
    """Delete one run with its rows; a paused or running run only with `force`.

    Raises:
        RunNotFoundError: No run has this id.
        StoreError: The run is paused or running and `force` is not set.
    """
    row = db.one("SELECT status, lease_until FROM converge_runs WHERE run_id = ?", (run_id,))
    if row is None:
        raise RunNotFoundError(f"no run {run_id!r} in {place}")
    status, _ = judge(row[0], row[1], now)
    if status in (RunStatus.PAUSED, RunStatus.RUNNING) and not force:
        raise StoreError(
            f"run {run_id} is {status.value}: not deleted (delete it with force=True, "
            "or wait until it stops)"
        )
    _drop(db, run_id)


def prune_runs(
    db: Db, selected: RunFilter, now: datetime, *, paused: bool, dry_run: bool
) -> list[str]:
    """Delete the runs `selected` takes with their rows; the ids deleted, oldest first.

    Never a running run whose lease holds, and a paused run only when `paused`; with
    `dry_run`, nothing is deleted and the ids are those that would be.
    """
    condition, values = where(selected, now.isoformat())
    rows = db.all(
        f"SELECT run_id, status FROM converge_runs WHERE {condition} "
        "AND NOT (status = 'running' AND lease_until > ?) ORDER BY saved_at, run_id",
        (*values, now.isoformat()),
    )
    taken = [str(run_id) for run_id, status in rows if paused or str(status) != "paused"]
    if not dry_run:
        for run_id in taken:
            _drop(db, run_id)
    return taken
