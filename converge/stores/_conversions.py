"""Runs to rows and rows to runs: the values a save writes, and what a read makes of them.

A finished or paused record writes its row (`to_row`, `final_row` for one stored as rows)
and its gates' rows (`gate_rows`); a per-cycle save writes its head (`progress_row`). Read
back, a row is judged as it stands now (`judge`: a running run whose lease ran out is
lost) and becomes a `RunSummary` or the `RunRecord` it holds. The upgrades fill the columns
added since from each stored record (`reindexed`, `recounted`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from pydantic import ValidationError

from .._core._exceptions import StoreError
from .._core._key import STORED
from .._core._listing import RunSummary
from .._core._progress import EntryCounts, ProgressHead, RunProgress
from .._core._record import Interruption, RunRecord
from .._core._record_head import RecordHead
from .._core._stop import RunStatus, StopReason
from ._assembly import assemble, assemble_final, said

__all__ = [
    "counts_text",
    "final_row",
    "gate_rows",
    "judge",
    "lease_until",
    "progress_row",
    "record_from",
    "recounted",
    "reindexed",
    "stored_record",
    "to_row",
    "to_summary",
]


def counts_text(counts: EntryCounts | None) -> str | None:
    """The `counts` cell of a journal entry: its `EntryCounts` as JSON, or NULL."""
    return None if counts is None else counts.model_dump_json()


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


def lease_until(now: datetime, seconds: float) -> datetime:
    """When a lease taken at `now` for `seconds` runs out."""
    return now + timedelta(seconds=seconds)


def to_row(record: RunRecord, saved_at: object) -> tuple[object, ...]:
    """The values a finished or paused record writes, in `_sql._WRITTEN` order less `version`.

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
