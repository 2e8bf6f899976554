"""The run store contract: the `RunStore` protocol and the records it saves and lists.

The backends live in `converge.stores` (`SqliteRunStore`, `PostgresRunStore`), one module
each, so that importing converge loads no database driver. Both keep one row per run:
searchable columns plus the whole record as JSON, under the versioned schema
`SCHEMA_VERSION`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final, Protocol, Self, final

from pydantic import Field, model_validator

from ._checkpoint import Checkpoint, FactRecord, restore_snapshot
from ._context import ContextSnapshot
from ._exceptions import StoreError
from ._hitl import GateRequest
from ._integrity import IntegrityProof
from ._model import FrozenModel
from ._result import Conflict, ConvergeResult
from ._signature import signature_matches, signature_of
from ._stop import StopReason
from ._trace import Rejection, RunTrace

__all__ = ["SCHEMA_VERSION", "RunRecord", "RunStore", "RunSummary"]

SCHEMA_VERSION: Final = 2
"""The version of the tables every backend writes; a store refuses any other."""


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
    signature: str | None = None
    """HMAC-SHA256 over the rest of the record (hex), when it was saved with a signing key."""
    version: int = Field(default=0, ge=0, exclude=True)
    """The store's version of this record when it was loaded (0: never saved). Not part of
    the record's JSON: each store keeps it beside the record and bumps it on every save."""

    @model_validator(mode="after")
    def _pending_is_the_checkpoints(self) -> Self:
        checkpoint = self.checkpoint
        shown = () if checkpoint is None else checkpoint.pending
        if self.pending != shown:
            raise ValueError(
                f"run {self.run_id}: the record's pending gates differ from its checkpoint's; "
                "a reviewer would be shown something other than what resume applies"
            )
        if checkpoint is not None and checkpoint.run_id != self.run_id:
            raise ValueError(
                f"run {self.run_id}: its checkpoint belongs to run {checkpoint.run_id}"
            )
        return self

    @classmethod
    def of(
        cls,
        result: ConvergeResult,
        *,
        name: str | None = None,
        formation: str | None = None,
        key: bytes | None = None,
    ) -> RunRecord:
        """The record of a run's result, optionally naming its formation; signed with `key`."""
        record = cls(
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
        return record if key is None else record.signed(key)

    def decided_by(self) -> str:
        """Who decided the run's gates so far, as `" (decided by jane: approved gate:…)"`."""
        decisions = self.trace.decisions
        if not decisions:
            return ""
        said = "; ".join(
            f"{decision.by}: {'approved' if decision.approved else 'rejected'} {decision.gate_id}"
            for decision in decisions
        )
        return f" (decided by {said})"

    def signed(self, key: bytes) -> RunRecord:
        """This record with its signature set under `key`."""
        return self.model_copy(update={"signature": signature_of(self, key)})

    def verify_signature(self, key: bytes | None) -> None:
        """Refuse an unsigned or mis-signed record when there is a key (nothing without one).

        Raises:
            StoreError: The record is unsigned, or it was changed or signed with another key.
        """
        if key is None:
            return
        if self.signature is None:
            raise StoreError(
                f"run {self.run_id}: the stored record is unsigned, but a signing key is set"
            )
        if not signature_matches(self, self.signature, key):
            raise StoreError(
                f"run {self.run_id}: the stored record has a bad signature: it was changed "
                "or signed with another key"
            )

    def restore_context(self) -> ContextSnapshot:
        """The stored context, through the one verifying restore (digests, order, root).

        Raises:
            StoreError: A fact, their order or the root does not match what was stored.
        """
        try:
            return restore_snapshot(
                self.facts,
                cycle=self.cycles,
                clock=self.integrity.clock,
                merkle_root=self.integrity.merkle_root,
            )
        except ValueError as error:
            raise StoreError(f"run {self.run_id}: {error}") from None

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

    async def save(self, record: RunRecord, /, *, expected_version: int | None = None) -> int:
        """Save the record of `record.run_id` atomically and return its new version.

        Versions start at 1 and grow by one with every save. `expected_version=None`
        replaces whatever is stored; `0` inserts a run that must not exist; `k` replaces the
        run only while it is at version `k`, and otherwise raises `StaleRecordError` and
        saves nothing (optimistic concurrency: no decision is silently lost).
        """
        ...

    async def load(self, run_id: str, /) -> RunRecord:
        """The stored record with its `version`; raises `RunNotFoundError` when there is none."""
        ...

    async def list_runs(self, *, limit: int = 50) -> Sequence[RunSummary]:
        """The most recently saved runs first."""
        ...

    async def load_checkpoint(self, run_id: str, /) -> Checkpoint | None:
        """The pending checkpoint of a paused run, or `None` if it is not paused."""
        ...
