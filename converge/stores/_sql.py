"""The SQL pieces every backend shares: columns, statements, row conversions, upgrades.

Statements are written with `?` placeholders; `PostgresRunStore` swaps them for `%s`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final, LiteralString

from pydantic import ValidationError

from .._core._exceptions import StoreError
from .._core._key import STORED
from .._core._stop import RunStatus, StopReason
from .._core._store import Interruption, RunProgress, RunRecord, RunSummary
from ._journal import assemble

__all__ = [
    "COLUMNS",
    "DROP_JOURNAL",
    "INSERT",
    "JOURNAL",
    "JOURNAL_TABLE",
    "PROGRESS_INSERT",
    "PROGRESS_UPDATE",
    "RECOUNT_SELECT",
    "RECOUNT_UPDATE",
    "RENEW",
    "UPDATE",
    "UPGRADES",
    "UPSERT",
    "judge",
    "lease_until",
    "progress_row",
    "record_from",
    "recounted",
    "stored_record",
    "to_row",
    "to_summary",
]

COLUMNS: Final = (
    "run_id, stop_reason, detail, cycles, fact_count, merkle_root, saved_at, name, status, "
    "lease_until, failures"
)
"""The searchable columns of `converge_runs`, in the order `to_summary` reads them."""

_WRITTEN: Final = (
    "run_id, stop_reason, detail, cycles, fact_count, merkle_root, saved_at, name, status, "
    "lease_until, failures, record, checkpoint, version"
)
_VALUES: Final = "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)"

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
    "checkpoint = excluded.checkpoint, version = converge_runs.version + 1 RETURNING version"
)
"""Insert or replace a run whatever its version (`expected_version=None`)."""

UPDATE: Final = (
    "UPDATE converge_runs SET run_id = ?, stop_reason = ?, detail = ?, cycles = ?, "
    "fact_count = ?, merkle_root = ?, saved_at = ?, name = ?, status = ?, lease_until = ?, "
    "failures = ?, record = ?, checkpoint = ?, version = version + 1 "
    "WHERE run_id = ? AND version = ? RETURNING version"
)
"""Replace a run only if it is still at the version the save was based on."""

PROGRESS_INSERT: Final = INSERT
"""Insert the first progress of a new run (the same columns as a record)."""
PROGRESS_UPDATE: Final = UPDATE
"""Replace a run's row by its progress head, at the expected version."""

DROP_JOURNAL: Final = "DELETE FROM converge_journal WHERE run_id = ?"
"""Drop a run's journal (a finished record replaces it, or a continuation restarts it)."""

JOURNAL: Final = "INSERT INTO converge_journal (run_id, seq, entry) VALUES (?, ?, ?)"
"""Append one journal entry."""

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
}
"""Statements that take the schema from version `k` to `k + 1`, in place, losing nothing.

After those of version 3, each backend recounts the failures of the stopped runs stored
before (`RECOUNT_SELECT`, `recounted`, `RECOUNT_UPDATE`)."""

RECOUNT_SELECT: Final = (
    "SELECT run_id, record FROM converge_runs WHERE status IN ('finished', 'paused')"
)
"""The stopped runs whose failures the upgrade to schema 4 counts."""
RECOUNT_UPDATE: Final = "UPDATE converge_runs SET failures = ? WHERE run_id = ?"
"""Set one run's failure count (`?` placeholders)."""

JOURNAL_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS converge_journal (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
    "entry TEXT NOT NULL, PRIMARY KEY (run_id, seq))"
)
"""The journal of running runs: one entry per per-cycle save."""


def lease_until(now: datetime, seconds: float) -> datetime:
    """When a lease taken at `now` for `seconds` runs out."""
    return now + timedelta(seconds=seconds)


def to_row(record: RunRecord, saved_at: object) -> tuple[object, ...]:
    """The values a finished or paused record writes, in `_WRITTEN` order less `version`.

    The `checkpoint` column (schema 1 and 2) is left empty: the record holds the checkpoint.
    """
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
        record.failure_count,
        record.model_dump_json(),
        None,
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
    )


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
    run_id, stop_reason, detail, cycles, fact_count, root, saved_at, name, status, lease, failed = (
        row
    )
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
    )


def stored_record(
    run_id: str, row: Sequence[object], entries: Sequence[str], now: datetime
) -> RunRecord:
    """The record of a `(record, version, status, lease_until)` row and its journal entries."""
    text, version, status, lease = row
    judged, interruption = judge(status, lease, now)
    if judged in (RunStatus.FINISHED, RunStatus.PAUSED):
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
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "record"
        raise StoreError(
            f"run {run_id}: the stored record is invalid ({error.error_count()} error(s); "
            f"{where}: {first['msg']})"
        ) from None
    if record.run_id != run_id:
        raise StoreError(f"the row of run {run_id} holds the record of run {record.run_id}")
    return record.model_copy(update={"version": version})
