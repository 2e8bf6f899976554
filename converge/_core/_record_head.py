"""`RecordHead` and `RunFinal`: a finished or paused run stored as rows.

When a run saved after every cycle finishes or pauses, its journal stays as its rows and
its row takes a `RecordHead` (saved by `RunFinal`): the record (and a paused run's
checkpoint) less what the entries hold, signed by itself, so what a command shows from the
head alone is authenticated without reading a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Self, final

from pydantic import Field, model_validator

from ._checkpoint import FactRecord
from ._exceptions import StoreError
from ._invariant import Violation
from ._key import KeyField
from ._listing import RunSummary
from ._model import FrozenModel
from ._progress import EntryCounts
from ._record import RunRecord
from ._signature import signature_matches
from ._stop import RunStatus
from ._trace import Execution, Rejection, RunTimes

__all__ = ["SHOWN_REJECTIONS", "RecordHead", "RunFinal"]

SHOWN_REJECTIONS: Final = 10
"""How many rejections a summary lists (`RecordHead.shown_rejections`)."""


@final
class RecordHead(FrozenModel, frozen=True):
    """What the row of a finished or paused run stored as rows holds: its record less the
    facts, the cycle traces, the rejections and the decisions, which its journal entries
    carry.

    `record` keeps the whole record's own signature (and a paused record's checkpoint its
    own), so the record assembled from the head and the entries verifies exactly as the
    record saved whole would. `journal_digest` chains the entries as `ProgressHead`'s does,
    and `signature` (with a signing key) covers the head itself: what a command shows from
    the head alone is authenticated without reading a row.
    """

    record: RunRecord
    """The record, its `facts`, `rejections` and `trace.cycles` empty (its human decisions,
    few, are kept; the entries hold them too); a paused record's checkpoint likewise, its
    pending gates and decisions kept."""
    keys: tuple[tuple[KeyField, int], ...]
    """How many facts each key has, in key order."""
    rejections: int = Field(ge=0)
    """How many rejections the entries hold."""
    shown_rejections: tuple[Rejection, ...] = ()
    """The first `SHOWN_REJECTIONS` of them, for what reads the head alone."""
    failures: tuple[tuple[int, Execution], ...] = ()
    """Each call that failed and was not made good, with its cycle (`RunTrace.failures`)."""
    rolled_back: tuple[Violation, ...] = ()
    """Each structural violation that rolled an effect back (`RunTrace.rolled_back`)."""
    invalid: tuple[Rejection, ...] = ()
    """Each rejection of a broken proposal (`Shortfall.invalid`)."""
    times: RunTimes = RunTimes()
    """When the run started and ended, and how long it ran (`RunTrace.times`)."""
    journal_length: int = Field(ge=0)
    """How many journal entries the run has."""
    journal_digest: str
    """The chain over those entries (as `ProgressHead.journal_digest`)."""
    cited: tuple[FactRecord, ...] = Field(default=(), exclude_if=lambda v: not v)
    """Of a paused run, the facts the evidence of its pending gates cites, as a reviewer is
    shown them (`cited_facts`); the entries hold them too. Left out of the JSON when empty,
    so the heads of finished runs read and verify as before."""
    counts_digest: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The chain over the counts stored beside the entries (each `EntryCounts` JSON, chained
    as `journal_digest` chains entries, from `SHA-256("converge-counts:" + run_id)`), so a
    count changed by hand is found; `None` (left out of the JSON) when some entry has none."""
    signature: str | None = None
    """HMAC-SHA256 over the rest of the head (hex), with a signing key."""

    @model_validator(mode="after")
    def _a_stopped_record(self) -> Self:
        record = self.record
        checkpoint = record.checkpoint
        if record.status is RunStatus.FINISHED:
            if checkpoint is not None or self.cited:
                raise ValueError(
                    f"run {record.run_id}: the head of a finished run holds no checkpoint"
                )
        elif record.status is not RunStatus.PAUSED or checkpoint is None:
            raise ValueError(
                f"run {record.run_id}: only a finished or paused run is stored as rows"
            )
        if record.facts or record.rejections or record.trace.cycles:
            raise ValueError(f"run {record.run_id}: a head holds no facts, rejections or traces")
        if checkpoint is not None and (
            checkpoint.facts or checkpoint.rejections or checkpoint.cycles
        ):
            raise ValueError(
                f"run {record.run_id}: a head's checkpoint holds no facts, rejections or traces"
            )
        return self

    @property
    def failure_count(self) -> int:
        """The record's `failure_count`."""
        return len(self.failures) + len(self.rolled_back)

    @property
    def shortfall(self) -> bool:
        """Whether the run fell short (`Shortfall`): failed calls not made good, invalid
        proposals or rolled-back effects."""
        return bool(self.failures or self.rolled_back or self.invalid)

    def summary(self, saved_at: datetime) -> RunSummary:
        """The record as one line (`RunRecord.summary`), from the head alone."""
        return self.record.summary(saved_at).model_copy(update={"failures": self.failure_count})

    def verify_signature(self, key: bytes | None) -> None:
        """Refuse an unsigned or mis-signed head when there is a key (nothing without one).

        Raises:
            StoreError: The head is unsigned, or it was changed or signed with another key.
        """
        if key is None:
            return
        run_id = self.record.run_id
        if self.signature is None:
            raise StoreError(f"run {run_id}: the stored head is unsigned, but a signing key is set")
        if not signature_matches(self, self.signature, key):
            raise StoreError(
                f"run {run_id}: the stored head has a bad signature: it was changed or "
                "signed with another key"
            )


@final
@dataclass(frozen=True, slots=True)
class RunFinal:
    """The save that ends a run stored as rows: its head and the last journal entry."""

    head: RecordHead
    """The run's head."""
    entry: str | None
    """The journal entry to append (JSON; `None` appends nothing)."""
    counts: EntryCounts | None = None
    """What `entry` holds, by number, stored beside it (`None`: not known)."""
