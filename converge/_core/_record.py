"""`RunRecord`: everything a store keeps about a run, and how a run's result becomes one.

A record saved whole (`RunStore.save`: a run saved only at its end, any record a caller
hands in) is one JSON document in the row; a running run's is assembled from its head and
journal (`_progress`), a finished or paused run's stored as rows from its head
(`_record_head`). `record_of` builds the record of a result from the records of its facts,
and never signs one whose facts were changed below the API.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final, Literal, Self, cast, final

from pydantic import Field, model_validator

from .._version import __version__
from ._checkpoint import AnyFact, Checkpoint, FactRecord, Lineage, fact_records, restore_snapshot
from ._context import ContextSnapshot
from ._exceptions import StoreError
from ._hitl import GateRequest
from ._integrity import IntegrityProof, ended_on
from ._listing import RunSummary
from ._model import FrozenModel
from ._progress import ProgressHead
from ._result import Conflict, ConvergeResult
from ._signature import signature_matches, signature_of
from ._stop import RunStatus, StopReason
from ._trace import Rejection, RunTrace

__all__ = ["Deferred", "RunRecord", "failure_count", "kept_facts", "record_of", "saved_facts"]

Interruption = Literal["cancelled", "lost"]
"""Why a run is `INTERRUPTED`: its caller cancelled it, or its process stopped saving."""

_UNSIGNED: Final = frozenset({"progress"})
"""Record fields the record's own signature leaves out (the head is signed by itself)."""


def failure_count(trace: RunTrace) -> int:
    """A run's calls that failed and were not made good (`RunTrace.failures`) plus its
    effects that a structural invariant rolled back (`RunTrace.rolled_back`)."""
    return len(trace.failures()) + len(trace.rolled_back())


@final
class RunRecord(FrozenModel, frozen=True):
    """Everything stored about a run: summary, proof, trace, facts, and any checkpoint."""

    run_id: str
    """The run's id."""
    stop_reason: StopReason | None
    """How it ended; `None` while running or interrupted."""
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
    progress: ProgressHead | None = None
    """The stored head of a running or interrupted run (its signature covers the record)."""
    lineage: Lineage | None = Field(default=None, exclude_if=lambda v: v is None)
    """Where a forked run branched off its parent (`Engine.fork`): left out of the JSON of
    any other run, so older records load and their signatures still verify."""
    converge_version: str = Field(default="", exclude_if=lambda version: not version)
    """The converge version that saved the finished or paused run (`""`: saved before 0.2.0,
    or a running run's head). Left out of the JSON when empty, so older records load and their
    signatures still verify."""
    status: RunStatus = Field(default=RunStatus.FINISHED, exclude=True)
    """Where the run stands; `PAUSED` exactly when `stop_reason` is `AWAITING_HUMAN`. Not
    part of the record's JSON: each store keeps it beside the record."""
    interruption: Interruption | None = Field(default=None, exclude=True)
    """Why an `INTERRUPTED` run is interrupted."""
    version: int = Field(default=0, ge=0, exclude=True)
    """The store's version of this record when it was loaded (0: never saved). Not part of
    the record's JSON: each store keeps it beside the record and bumps it on every save."""

    @model_validator(mode="after")
    def _status_fits(self) -> Self:
        if "status" not in self.model_fields_set and self.stop_reason is StopReason.AWAITING_HUMAN:
            object.__setattr__(self, "status", RunStatus.PAUSED)  # the default, derived
        stopped = self.status in (RunStatus.FINISHED, RunStatus.PAUSED)
        paused = self.stop_reason is StopReason.AWAITING_HUMAN
        if stopped != (self.stop_reason is not None) or paused != (self.status is RunStatus.PAUSED):
            raise ValueError(
                f"run {self.run_id}: status {self.status.value} does not fit stop reason "
                f"{None if self.stop_reason is None else self.stop_reason.value}"
            )
        if (self.progress is not None) == stopped:
            raise ValueError(f"run {self.run_id}: only a running run has a progress head")
        return self

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
        """The record of a run's result, optionally naming its formation; signed with `key`.

        Each fact is recorded with the leaf digest the engine kept at its promotion, and
        checked against it (`fact_records`). When a fact was changed below the API since, the
        record says so and is not signed: it ends `INVARIANT_VIOLATED` on the built-in
        `integrity` check (with no pending gate), and its facts do not verify.
        """
        facts, problem = fact_records(result.context)
        return record_of(result, facts, problem, name=name, formation=formation, key=key)

    @classmethod
    def saved(cls, result: ConvergeResult) -> RunRecord | None:
        """The record the engine saved of `result`'s run, when it has a store; else `None`.

        It is the record the store holds. A run saved as rows, unsigned, that did not pause
        has it built on the first call, with its facts recorded and checked then (a fact
        changed in memory since the run ended makes it say so, as `of` does); any other's
        was built as the run stopped. `of` builds a record of any result, checking every
        fact again.
        """
        saved = result._saved  # pyright: ignore[reportPrivateUsage]
        if isinstance(saved, Deferred):
            saved = saved.whole(result)
            object.__setattr__(result, "_saved", saved)
        return saved if isinstance(saved, RunRecord) else None

    @property
    def outcome(self) -> str:
        """The stop reason's value, or the status's while the run has none (`"running"`)."""
        return self.status.value if self.stop_reason is None else self.stop_reason.value

    @property
    def failure_count(self) -> int:
        """Its calls that failed and were not made good plus its effects that a structural
        invariant rolled back (`failure_count`): a run that converged with any converged
        with failures."""
        return failure_count(self.trace)

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
        return self.model_copy(update={"signature": signature_of(self, key, _UNSIGNED)})

    def verify_signature(self, key: bytes | None) -> None:
        """Refuse an unsigned or mis-signed record when there is a key (nothing without one).

        Raises:
            StoreError: The record is unsigned, or it was changed or signed with another key.
        """
        if key is None:
            return
        head = self.progress
        if head is not None:
            if head.signature is None:
                raise StoreError(
                    f"run {self.run_id}: the stored progress is unsigned, but a signing key is set"
                )
            if not signature_matches(head, head.signature, key):
                raise StoreError(
                    f"run {self.run_id}: the stored progress has a bad signature: it was "
                    "changed or signed with another key"
                )
            return
        if self.signature is None:
            raise StoreError(
                f"run {self.run_id}: the stored record is unsigned, but a signing key is set"
            )
        if not signature_matches(self, self.signature, key, _UNSIGNED):
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
            status=self.status,
            stop_reason=self.stop_reason,
            detail=self.detail,
            cycles=self.cycles,
            fact_count=self.integrity.fact_count,
            merkle_root=self.integrity.merkle_root,
            saved_at=saved_at,
            name=self.name,
            failures=self.failure_count,
            pending=len(self.pending),
            parent_run_id=None if self.lineage is None else self.lineage.parent_run_id,
            fork_cycle=None if self.lineage is None else self.lineage.at_cycle,
        )


def kept_facts(result: ConvergeResult) -> tuple[FactRecord, ...] | None:
    """The records of `result`'s facts as its run's end checked them, when it kept them (a
    run an engine saves whole when it stops); `None` otherwise."""
    facts = result._facts  # pyright: ignore[reportPrivateUsage]
    return cast("tuple[FactRecord, ...]", facts) if isinstance(facts, tuple) else None


def record_of(
    result: ConvergeResult,
    facts: tuple[FactRecord, ...],
    problem: str | None,
    *,
    name: str | None = None,
    formation: str | None = None,
    key: bytes | None = None,
) -> RunRecord:
    """`RunRecord.of(result)`, with the records of its facts (`fact_records`'s) given: what
    they found changed below the API, if anything, is `problem`."""
    stop_reason, detail, trace = result.stop_reason, result.detail, result.trace
    if problem is not None:
        key = None  # never signed as if it were what the engine promoted
        detail = ended_on(problem)
        if stop_reason is not StopReason.INVARIANT_VIOLATED or result.detail != detail:
            stop_reason = StopReason.INVARIANT_VIOLATED
            trace = trace.model_copy(update={"stop_reason": stop_reason, "detail": detail})
    record = RunRecord(
        name=name,
        formation=formation,
        run_id=result.run_id,
        stop_reason=stop_reason,
        detail=detail,
        cycles=result.cycles,
        tokens=result.tokens,
        integrity=result.integrity,
        trace=trace,
        facts=facts,
        rejections=result.rejections,
        pending=() if problem is not None else result.pending,
        checkpoint=None if problem is not None else result.checkpoint,
        conflict=result.conflict,
        lineage=result.lineage,
        converge_version=__version__,
    )
    return record if key is None else record.signed(key)


@final
class Deferred:
    """The record of a run saved as rows, less its facts' records (what its head holds):
    `RunRecord.saved` builds the record with them on first use, the CLI's report and
    summary read the result's facts instead (`saved_facts`)."""

    __slots__ = ("bare",)

    def __init__(self, bare: RunRecord) -> None:
        self.bare = bare

    def whole(self, result: ConvergeResult) -> RunRecord:
        """The record with its facts, each recorded and checked now (`fact_records`)."""
        facts, problem = fact_records(result.context)
        if problem is None:
            return self.bare.model_copy(update={"facts": facts})
        bare = self.bare
        return record_of(result, facts, problem, name=bare.name, formation=bare.formation)


def saved_facts(result: ConvergeResult) -> tuple[RunRecord, Sequence[AnyFact]] | None:
    """The record the engine saved of `result`'s run, and the facts to show of it, without
    building the records of its facts when the record was saved as rows (`Deferred`): then
    the record less its facts, and the result's own, which the run's end checked against
    their leaves. Any other saved record, with its facts. `None` when nothing was saved."""
    saved = result._saved  # pyright: ignore[reportPrivateUsage]
    if isinstance(saved, Deferred):
        return saved.bare, result.context.facts()
    return None if not isinstance(saved, RunRecord) else (saved, saved.facts)
