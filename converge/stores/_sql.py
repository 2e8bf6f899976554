"""The SQL pieces every backend shares: the searchable columns and the row conversions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from .._stop import StopReason
from .._store import RunRecord, RunSummary

__all__ = ["COLUMNS", "to_row", "to_summary"]

COLUMNS: Final = "run_id, stop_reason, detail, cycles, fact_count, merkle_root, saved_at, name"
"""The searchable columns of `converge_runs`, in the order `to_summary` reads them."""


def to_row(record: RunRecord, saved_at: datetime) -> tuple[object, ...]:
    """The values of `COLUMNS`, then the record and the checkpoint as JSON."""
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
