"""The SQL pieces every backend shares: columns, statements, row conversions, upgrades.

Statements are written with `?` placeholders; `PostgresRunStore` swaps them for `%s`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, LiteralString, final

from pydantic import ValidationError

from .._core._exceptions import StoreError
from .._core._key import STORED
from .._core._listing import RunSummary
from .._core._progress import EntryCounts, ProgressHead, RunProgress
from .._core._record import Interruption, RunRecord
from .._core._record_head import RecordHead
from .._core._stop import RunStatus, StopReason
from .._core._store import SCHEMA_VERSION
from ._journal import assemble, assemble_final, said

__all__ = [
    "ADD_COUNTS",
    "COLUMNS",
    "COUNTS_INDEX",
    "COUNTS_SELECT",
    "DROP_GATES",
    "DROP_JOURNAL",
    "GATES_TABLE",
    "GATE_INSERT",
    "INDEXES",
    "INDEX_SELECT",
    "INDEX_UPDATE",
    "INSERT",
    "JOURNAL",
    "JOURNAL_COLUMNS",
    "JOURNAL_TABLE",
    "PROGRESS_INSERT",
    "PROGRESS_UPDATE",
    "RECOUNT_SELECT",
    "RECOUNT_UPDATE",
    "RENEW",
    "RUN_COLUMNS",
    "UPDATE",
    "UPGRADES",
    "UPSERT",
    "RunFilter",
    "counts_missing",
    "counts_text",
    "final_row",
    "gate_rows",
    "judge",
    "lease_until",
    "newer",
    "progress_row",
    "record_from",
    "recounted",
    "reindexed",
    "stored_record",
    "to_row",
    "to_summary",
    "where",
]

COLUMNS: Final = (
    "run_id, stop_reason, detail, cycles, fact_count, merkle_root, saved_at, name, status, "
    "lease_until, failures, pending, parent_run_id, fork_cycle"
)
"""The searchable columns of `converge_runs`, in the order `to_summary` reads them."""

_WRITTEN: Final = (
    "run_id, stop_reason, detail, cycles, fact_count, merkle_root, saved_at, name, status, "
    "lease_until, failures, record, checkpoint, formation, pending, parent_run_id, fork_cycle, "
    "layout, version"
)
_VALUES: Final = "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)"

INSERT: Final = (
    f"INSERT INTO converge_runs ({_WRITTEN}) {_VALUES} "
    "ON CONFLICT (run_id) DO NOTHING RETURNING version"
)
"""Insert a run that must not exist yet (`expected_version=0`); also `PROGRESS_INSERT`."""

UPSERT: Final = (
    f"INSERT INTO converge_runs ({_WRITTEN}) {_VALUES} ON CONFLICT (run_id) DO UPDATE SET "
    "stop_reason = excluded.stop_reason, detail = excluded.detail, cycles = excluded.cycles, "
    "fact_count = excluded.fact_count, merkle_root = excluded.merkle_root, "
    "saved_at = excluded.saved_at, name = excluded.name, status = excluded.status, "
    "lease_until = excluded.lease_until, failures = excluded.failures, record = excluded.record, "
    "checkpoint = excluded.checkpoint, formation = excluded.formation, "
    "pending = excluded.pending, parent_run_id = excluded.parent_run_id, "
    "fork_cycle = excluded.fork_cycle, layout = excluded.layout, "
    "version = converge_runs.version + 1 RETURNING version"
)
"""Insert or replace a run whatever its version (`expected_version=None`)."""

UPDATE: Final = (
    "UPDATE converge_runs SET run_id = ?, stop_reason = ?, detail = ?, cycles = ?, "
    "fact_count = ?, merkle_root = ?, saved_at = ?, name = ?, status = ?, lease_until = ?, "
    "failures = ?, record = ?, checkpoint = ?, formation = ?, pending = ?, parent_run_id = ?, "
    "fork_cycle = ?, layout = ?, version = version + 1 "
    "WHERE run_id = ? AND version = ? RETURNING version"
)
"""Replace a run only if it is still at the version the save was based on."""

PROGRESS_INSERT: Final = INSERT
"""Insert the first progress of a new run (the same columns as a record)."""
PROGRESS_UPDATE: Final = UPDATE
"""Replace a run's row by its progress head, at the expected version."""

DROP_JOURNAL: Final = "DELETE FROM converge_journal WHERE run_id = ?"
"""Drop a run's journal (a finished record replaces it, or a continuation restarts it)."""

JOURNAL: Final = "INSERT INTO converge_journal (run_id, seq, entry, counts) VALUES (?, ?, ?, ?)"
"""Append one journal entry, with its counts (`EntryCounts` JSON, or NULL)."""

COUNTS_SELECT: Final = "SELECT seq, counts FROM converge_journal WHERE run_id = ? ORDER BY seq"
"""`(seq, counts)` of each of a run's journal entries, in order."""

JOURNAL_COLUMNS: Final = "SELECT * FROM converge_journal WHERE 1 = 0"
"""No row: its cursor's description names the journal's columns."""
COUNTS_INDEX: Final = (
    "CREATE INDEX IF NOT EXISTS converge_journal_counts ON converge_journal (run_id, seq, counts)"
)
"""SQLite's index that answers `COUNTS_SELECT` alone: its rows keep `counts` after the
entry, so reading it from the table walks every entry's pages (PostgreSQL keeps a large
entry out of line, and reads the counts without it)."""
ADD_COUNTS: Final = "ALTER TABLE converge_journal ADD COLUMN counts TEXT"
"""The upgrade to schema 8, when the journal lacks the column (a store older than schema 3
had no journal, and was given today's)."""

RENEW: Final = (
    "UPDATE converge_runs SET lease_until = ? "
    "WHERE run_id = ? AND version = ? AND status = 'running' RETURNING version"
)
"""Extend a running run's lease, keeping its version."""

UPGRADES: Final[dict[int, tuple[LiteralString, ...]]] = {
    1: ("ALTER TABLE converge_runs ADD COLUMN version INTEGER NOT NULL DEFAULT 1",),
    2: (
        "ALTER TABLE converge_runs ADD COLUMN status TEXT NOT NULL DEFAULT 'finished'",
        "UPDATE converge_runs SET status = 'paused' WHERE stop_reason = 'awaiting_human'",
        "ALTER TABLE converge_runs ADD COLUMN lease_until TEXT",
    ),
    3: ("ALTER TABLE converge_runs ADD COLUMN failures INTEGER NOT NULL DEFAULT 0",),
    4: (
        "ALTER TABLE converge_runs ADD COLUMN formation TEXT",
        "ALTER TABLE converge_runs ADD COLUMN pending INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE converge_runs ADD COLUMN parent_run_id TEXT",
        "ALTER TABLE converge_runs ADD COLUMN fork_cycle INTEGER",
    ),
    5: ("ALTER TABLE converge_runs ADD COLUMN layout TEXT NOT NULL DEFAULT 'whole'",),
    6: (),  # the tables stay; paused runs may now be stored as rows, which 6 could not read
    7: (),  # ADD_COUNTS, unless the journal was made with the column (`counts_missing`)
}
"""Statements that take the schema from version `k` to `k + 1`, in place, losing nothing.

After those of version 3, each backend recounts the failures of the stopped runs stored
before (`RECOUNT_SELECT`, `recounted`, `RECOUNT_UPDATE`); after those of version 4, it fills
the new columns and the gates table from each stored record (`INDEX_SELECT`, `reindexed`,
`INDEX_UPDATE`, `GATE_INSERT`); with those of version 7, it adds the journal's `counts`
column (`ADD_COUNTS`), left NULL in the rows written before."""

RUN_COLUMNS: Final = (
    "run_id TEXT PRIMARY KEY, stop_reason TEXT NOT NULL, detail TEXT NOT NULL, "
    "cycles INTEGER NOT NULL, fact_count INTEGER NOT NULL, merkle_root TEXT NOT NULL, "
    "saved_at {time} NOT NULL, name TEXT, record TEXT NOT NULL, checkpoint TEXT, "
    "version INTEGER NOT NULL DEFAULT 1, status TEXT NOT NULL DEFAULT 'finished', "
    "lease_until TEXT, failures INTEGER NOT NULL DEFAULT 0, formation TEXT, "
    "pending INTEGER NOT NULL DEFAULT 0, parent_run_id TEXT, fork_cycle INTEGER, "
    "layout TEXT NOT NULL DEFAULT 'whole'"
)
"""The columns of a new `converge_runs` table (`{time}`: the backend's type for times)."""

GATES_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS converge_gates (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
    "gate_id TEXT NOT NULL, cycle INTEGER NOT NULL, ref TEXT NOT NULL, "
    "suggestor TEXT NOT NULL, summary TEXT NOT NULL, deadline TEXT, "
    "PRIMARY KEY (run_id, seq))"
)
"""The pending gates of paused runs, one row each, for the inbox (an index of the records:
a paused run's record is what `review RUN` and `resume` check and apply)."""

INDEXES: Final[dict[str, LiteralString]] = {
    "converge_runs_status": (
        "CREATE INDEX IF NOT EXISTS converge_runs_status ON converge_runs (status, saved_at)"
    ),
    "converge_runs_pending": (
        "CREATE INDEX IF NOT EXISTS converge_runs_pending ON converge_runs (pending, saved_at)"
    ),
    "converge_runs_parent": (
        "CREATE INDEX IF NOT EXISTS converge_runs_parent ON converge_runs (parent_run_id)"
    ),
}
"""The indexes the run queries use, by name, made once the schema is current."""

GATE_INSERT: Final = (
    "INSERT INTO converge_gates (run_id, seq, gate_id, cycle, ref, suggestor, summary, "
    "deadline) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
"""One pending gate of a paused run."""
DROP_GATES: Final = "DELETE FROM converge_gates WHERE run_id = ?"
"""Drop a run's pending gates (every save rewrites them)."""

INDEX_SELECT: Final = "SELECT run_id, record, status FROM converge_runs"
"""Every run, for the upgrade to schema 5 to fill its new columns from."""
INDEX_UPDATE: Final = (
    "UPDATE converge_runs SET formation = ?, pending = ?, parent_run_id = ?, fork_cycle = ? "
    "WHERE run_id = ?"
)
"""Set one run's schema 5 columns."""

RECOUNT_SELECT: Final = (
    "SELECT run_id, record FROM converge_runs WHERE status IN ('finished', 'paused')"
)
"""The stopped runs whose failures the upgrade to schema 4 counts."""
RECOUNT_UPDATE: Final = "UPDATE converge_runs SET failures = ? WHERE run_id = ?"
"""Set one run's failure count (`?` placeholders)."""

JOURNAL_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS converge_journal (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
    "entry TEXT NOT NULL, counts TEXT, PRIMARY KEY (run_id, seq))"
)
"""The journal of running runs, and the rows of finished and paused runs stored as rows
(`layout = 'rows'`): one entry per per-cycle save, and the last one per run at its end;
beside each, from schema 8, its `EntryCounts` as JSON (NULL in rows written before)."""


def counts_missing(description: Sequence[Sequence[object]] | None) -> bool:
    """Whether a journal lacks the `counts` column, by its cursor's `description`."""
    return "counts" not in {str(column[0]) for column in description or ()}


def counts_text(counts: EntryCounts | None) -> str | None:
    """The `counts` cell of a journal entry: its `EntryCounts` as JSON, or NULL."""
    return None if counts is None else counts.model_dump_json()


@final
@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs a listing or a prune takes; every field set narrows it.

    Times are in the backend's own form for `saved_at`: ISO 8601 text in SQLite, `datetime`
    in PostgreSQL.
    """

    status: RunStatus | StopReason | None = None
    """A status as it stands now (a running run whose lease ran out is interrupted), or a
    stop reason."""
    formation: str | None = None
    """The formation's name or locator, exactly."""
    pending: bool | None = None
    """Only runs waiting on a human gate (`True`), or only the others (`False`)."""
    since: object = None
    """Saved at or after this time."""
    before: object = None
    """Saved before this time."""
    search: str | None = None
    """Text found in the run id or the formation's name (any case)."""


def where(selected: RunFilter, now: str) -> tuple[LiteralString, tuple[object, ...]]:
    """The `WHERE` condition of `selected` at `now` (ISO 8601 text), and its values."""
    parts: list[LiteralString] = ["1 = 1"]
    values: list[object] = []
    status = selected.status
    if isinstance(status, StopReason):
        parts.append("stop_reason = ?")
        values.append(status.value)
    elif status is RunStatus.RUNNING:
        parts.append("status = 'running' AND lease_until > ?")
        values.append(now)
    elif status is RunStatus.INTERRUPTED:
        parts.append("(status = 'interrupted' OR (status = 'running' AND lease_until <= ?))")
        values.append(now)
    elif status is not None:
        parts.append("status = ?")
        values.append(status.value)
    if selected.formation is not None:
        parts.append("(name = ? OR formation = ?)")
        values += [selected.formation, selected.formation]
    if selected.pending is not None:
        parts.append("pending > 0" if selected.pending else "pending = 0")
    if selected.since is not None:
        parts.append("saved_at >= ?")
        values.append(selected.since)
    if selected.before is not None:
        parts.append("saved_at < ?")
        values.append(selected.before)
    if selected.search:
        escaped = selected.search.lower().replace("\\", "\\\\").replace("%", "\\%")
        pattern = "%" + escaped.replace("_", "\\_") + "%"
        parts.append(
            "(lower(run_id) LIKE ? ESCAPE '\\' OR lower(coalesce(name, '')) LIKE ? ESCAPE '\\')"
        )
        values += [pattern, pattern]
    return " AND ".join(parts), tuple(values)


def gate_rows(record: RunRecord) -> list[tuple[object, ...]]:
    """The `converge_gates` rows of a record (none unless it is paused)."""
    return [
        (
            record.run_id,
            seq,
            gate.gate_id,
            gate.cycle,
            gate.proposal.ref,
            gate.suggestor,
            gate.summary,
            None if gate.deadline is None else gate.deadline.isoformat(),
        )
        for seq, gate in enumerate(record.pending)
    ]


def reindexed(
    rows: Sequence[Sequence[object]],
) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """The `INDEX_UPDATE` values and the gate rows of each `(run_id, record, status)` row.

    A record or head that no longer reads keeps empty columns: `load` reports it when read.
    """
    updates: list[tuple[object, ...]] = []
    gates: list[tuple[object, ...]] = []
    for run_id, text, status in rows:
        try:
            if str(status) in ("finished", "paused"):
                record = RunRecord.model_validate_json(str(text), context=STORED)
                if record.run_id != str(run_id):
                    continue
                updates.append((*_indexed(record), str(run_id)))
                gates.extend(gate_rows(record))
            else:
                head = ProgressHead.model_validate_json(str(text), context=STORED)
                updates.append((head.formation, 0, None, None, str(run_id)))
        except ValidationError:
            continue
    return updates, gates


def newer(version: object) -> str:
    """What to add when a store's schema `version` is newer than this converge reads."""
    try:
        number = int(str(version))
    except ValueError:
        return ""
    if number <= SCHEMA_VERSION:
        return ""
    return ": it was written by a newer converge; upgrade converge to read it (nothing changed)"


def lease_until(now: datetime, seconds: float) -> datetime:
    """When a lease taken at `now` for `seconds` runs out."""
    return now + timedelta(seconds=seconds)


def to_row(record: RunRecord, saved_at: object) -> tuple[object, ...]:
    """The values a finished or paused record writes, in `_WRITTEN` order less `version`.

    The `checkpoint` column (schema 1 and 2) is left empty: the record holds the checkpoint.
    """
    return _row(record, saved_at, record.failure_count, record.model_dump_json(), "whole")


def _row(
    record: RunRecord, saved_at: object, failures: int, text: str, layout: str
) -> tuple[object, ...]:
    stop = record.stop_reason
    return (
        record.run_id,
        "" if stop is None else stop.value,
        record.detail,
        record.cycles,
        record.integrity.fact_count,
        record.integrity.merkle_root,
        saved_at,
        record.name,
        record.status.value,
        None,
        failures,
        text,
        None,
        *_indexed(record),
        layout,
    )


def _indexed(record: RunRecord) -> tuple[object, ...]:
    """The columns of schema 5 a record fills: formation, pending gates, parent, fork cycle."""
    lineage = record.lineage
    return (
        record.formation,
        len(record.pending),
        None if lineage is None else lineage.parent_run_id,
        None if lineage is None else lineage.at_cycle,
    )


def progress_row(progress: RunProgress, saved_at: object, lease: object) -> tuple[object, ...]:
    """The values a per-cycle save writes, in the same order as `to_row`."""
    head = progress.head
    return (
        head.run_id,
        "",
        f"{progress.status.value}: saved after cycle {head.cycle}",
        head.cycle,
        head.fact_count,
        "",
        saved_at,
        head.name,
        progress.status.value,
        lease,
        0,
        head.model_dump_json(),
        None,
        head.formation,
        0,
        None,
        None,
        "rows",
    )


def final_row(head: RecordHead, saved_at: object) -> tuple[object, ...]:
    """The values the end of a run stored as rows writes, in the same order as `to_row`."""
    return _row(head.record, saved_at, head.failure_count, head.model_dump_json(), "rows")


def judge(status: object, lease: object, now: datetime) -> tuple[RunStatus, Interruption | None]:
    """A stored status as it stands at `now`: a running run whose lease ran out is lost."""
    stored = RunStatus(str(status))
    if stored is RunStatus.INTERRUPTED:
        return stored, "cancelled"
    if stored is RunStatus.RUNNING:
        until = lease if isinstance(lease, datetime) else datetime.fromisoformat(str(lease))
        if until <= now:
            return RunStatus.INTERRUPTED, "lost"
    return stored, None


def to_summary(row: Sequence[object], now: datetime) -> RunSummary:
    """The summary of a row of `COLUMNS` (times as `datetime` or ISO 8601 text)."""
    (
        run_id,
        stop_reason,
        detail,
        cycles,
        fact_count,
        root,
        saved_at,
        name,
        status,
        lease,
        failed,
        pending,
        parent,
        fork_cycle,
    ) = row
    judged, _ = judge(status, lease, now)
    if judged is not RunStatus(str(status)):
        detail = f"{judged.value}: its process stopped saving (lease ran out at {lease})"
    saved = saved_at if isinstance(saved_at, datetime) else datetime.fromisoformat(str(saved_at))
    return RunSummary(
        name=None if name is None else str(name),
        run_id=str(run_id),
        status=judged,
        stop_reason=StopReason(str(stop_reason)) if stop_reason else None,
        detail=str(detail),
        cycles=int(str(cycles)),
        fact_count=int(str(fact_count)),
        merkle_root=str(root),
        saved_at=saved,
        failures=int(str(failed)),
        pending=int(str(pending)),
        parent_run_id=None if parent is None else str(parent),
        fork_cycle=None if fork_cycle is None else int(str(fork_cycle)),
    )


def stored_record(
    run_id: str, row: Sequence[object], entries: Sequence[str], now: datetime
) -> RunRecord:
    """The record of a `(record, version, status, lease_until, layout)` row and its journal."""
    text, version, status, lease, layout = row
    judged, interruption = judge(status, lease, now)
    if judged in (RunStatus.FINISHED, RunStatus.PAUSED):
        if str(layout) == "rows":
            return assemble_final(str(text), entries, run_id=run_id, version=int(str(version)))
        return record_from(run_id, str(text), int(str(version)))
    return assemble(
        str(text),
        entries,
        run_id=run_id,
        status=judged,
        interruption=interruption,
        version=int(str(version)),
    )


def recounted(rows: Sequence[Sequence[object]]) -> list[tuple[int, str]]:
    """`(failures, run_id)` of each `(run_id, record)` row whose record has failures.

    A record that no longer reads is left at 0: `load` reports it when it is read.
    """
    counts: list[tuple[int, str]] = []
    for run_id, text in rows:
        try:
            count = RunRecord.model_validate_json(str(text), context=STORED).failure_count
        except ValidationError:
            continue
        if count:
            counts.append((count, str(run_id)))
    return counts


def record_from(run_id: str, text: str, version: int) -> RunRecord:
    """The record stored under `run_id`, at `version`, checked to be that run's.

    Raises:
        StoreError: The stored JSON is not a valid record, or it is another run's.
    """
    try:
        record = RunRecord.model_validate_json(text, context=STORED)
    except ValidationError as error:
        raise StoreError(f"run {run_id}: the stored record is invalid ({said(error)})") from None
    if record.run_id != run_id:
        raise StoreError(f"the row of run {run_id} holds the record of run {record.run_id}")
    return record.model_copy(update={"version": version})
