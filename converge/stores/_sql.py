"""The SQL pieces every backend shares: columns, statements, row conversions, upgrades.

Statements are written with `?` placeholders; `PostgresRunStore` swaps them for `%s`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final, LiteralString

from pydantic import ValidationError

from .._exceptions import StoreError
from .._stop import StopReason
from .._store import RunRecord, RunSummary

__all__ = [
    "COLUMNS",
    "INSERT",
    "UPDATE",
    "UPGRADES",
    "UPSERT",
    "record_from",
    "to_row",
    "to_summary",
]

COLUMNS: Final = "run_id, stop_reason, detail, cycles, fact_count, merkle_root, saved_at, name"
"""The searchable columns of `converge_runs`, in the order `to_summary` reads them."""

INSERT: Final = (
    f"INSERT INTO converge_runs ({COLUMNS}, record, checkpoint, version) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1) ON CONFLICT (run_id) DO NOTHING RETURNING version"
)
"""Insert a run that must not exist yet (`expected_version=0`)."""

UPSERT: Final = (
    f"INSERT INTO converge_runs ({COLUMNS}, record, checkpoint, version) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1) ON CONFLICT (run_id) DO UPDATE SET "
    "stop_reason = excluded.stop_reason, detail = excluded.detail, cycles = excluded.cycles, "
    "fact_count = excluded.fact_count, merkle_root = excluded.merkle_root, "
    "saved_at = excluded.saved_at, name = excluded.name, record = excluded.record, "
    "checkpoint = excluded.checkpoint, version = converge_runs.version + 1 RETURNING version"
)
"""Insert or replace a run whatever its version (`expected_version=None`)."""

UPDATE: Final = (
    "UPDATE converge_runs SET run_id = ?, stop_reason = ?, detail = ?, cycles = ?, "
    "fact_count = ?, merkle_root = ?, saved_at = ?, name = ?, record = ?, checkpoint = ?, "
    "version = version + 1 WHERE run_id = ? AND version = ? RETURNING version"
)
"""Replace a run only if it is still at the version the save was based on."""

UPGRADES: Final[dict[int, tuple[LiteralString, ...]]] = {
    1: ("ALTER TABLE converge_runs ADD COLUMN version INTEGER NOT NULL DEFAULT 1",),
}
"""Statements that take the schema from version `k` to `k + 1`, in place, losing nothing."""


def to_row(record: RunRecord, saved_at: object) -> tuple[object, ...]:
    """The values of `COLUMNS`, then the record and the checkpoint as JSON."""
    checkpoint = None if record.checkpoint is None else record.checkpoint.model_dump_json()
    return (
        record.run_id,
        record.stop_reason.value,
        record.detail,
        record.cycles,
        record.integrity.fact_count,
        record.integrity.merkle_root,
        saved_at,
        record.name,
        record.model_dump_json(),
        checkpoint,
    )


def to_summary(row: Sequence[object]) -> RunSummary:
    """The summary of a row of `COLUMNS` (`saved_at` as ISO 8601 text)."""
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


def record_from(run_id: str, text: str, version: int) -> RunRecord:
    """The record stored under `run_id`, at `version`, checked to be that run's.

    Raises:
        StoreError: The stored JSON is not a valid record, or it is another run's.
    """
    try:
        record = RunRecord.model_validate_json(text)
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
