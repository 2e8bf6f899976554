"""The run store contract: the `RunStore` protocol and the records it saves and lists.

The backends live in `converge.stores` (`SqliteRunStore`, `PostgresRunStore`), one module
each, so that importing converge loads no database driver. Both keep one row per run, with
searchable columns, a status and a version, under the versioned schema `SCHEMA_VERSION`.
A running run's row holds a small `ProgressHead`, and each cycle's additions are appended
beside it as one journal entry (`RunProgress`), so a per-cycle save costs what the cycle
added, not the run. When such a run finishes or pauses, its journal stays as its rows and
its row takes a `RecordHead` (`RunFinal`): the record (and a paused run's checkpoint) less
what the entries hold. A record saved whole (`RunStore.save`: a run saved only at its end,
any record a caller hands in) is one JSON document in the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal, Protocol, Self, cast, final, runtime_checkable

from pydantic import Field, model_validator

from .._version import __version__
from ._checkpoint import Checkpoint, FactRecord, Lineage, fact_records, restore_snapshot
from ._context import ContextSnapshot
from ._exceptions import StoreError
from ._hitl import GateRequest
from ._integrity import IntegrityProof, ended_on
from ._invariant import Violation
from ._key import KeyField
from ._model import FrozenModel
from ._proposal import ProposedFact
from ._result import Conflict, ConvergeResult
from ._signature import signature_matches, signature_of
from ._stop import RunStatus, StopReason
from ._trace import Continuation, Execution, Rejection, RunTimes, RunTrace

__all__ = [
    "SCHEMA_VERSION",
    "SHOWN_REJECTIONS",
    "EntryCounts",
    "PendingGate",
    "ProgressHead",
    "RecordHead",
    "RowStore",
    "RunFinal",
    "RunProgress",
    "RunRecord",
    "RunStore",
    "RunSummary",
    "failure_count",
    "kept_facts",
    "record_of",
]

SCHEMA_VERSION: Final = 8
"""The version of the tables every backend writes; a store refuses any other."""

SHOWN_REJECTIONS: Final = 10
"""How many rejections a summary lists (`RecordHead.shown_rejections`)."""

Interruption = Literal["cancelled", "lost"]
"""Why a run is `INTERRUPTED`: its caller cancelled it, or its process stopped saving."""


@final
class ProgressHead(FrozenModel, frozen=True):
    """What a running run's row holds besides its journal: everything but the facts, the
    cycle traces, the rejections and the decisions, which the journal entries carry.

    `journal_digest` chains every entry's JSON (`SHA-256(previous digest + entry)`, from
    `SHA-256("converge-journal:" + run_id)`), and `signature` (with a signing key) covers
    the head, so an entry changed, dropped, added or reordered in the store is refused.
    """

    run_id: str
    """The run."""
    name: str | None = None
    """The formation's name, if recorded."""
    formation: str | None = None
    """Where the formation can be loaded from, if recorded."""
    registrations: tuple[str, ...]
    """The registrations fingerprint, as a checkpoint records it."""
    invariants: tuple[str, ...]
    """The invariants fingerprint, as a checkpoint records it."""
    inputs: tuple[ProposedFact, ...] = ()
    """The run's inputs."""
    input_violations: tuple[Violation, ...] = ()
    """Structural violations of the inputs."""
    initial_root: str
    """The Merkle root of the starting context."""
    cycle: int
    """The last cycle saved."""
    clock: int
    """The Lamport clock after it."""
    version: int
    """The context's version after it."""
    fact_count: int
    """Facts in the context after it."""
    dirty: tuple[KeyField, ...]
    """Keys that gained facts in it (what the next cycle wakes up)."""
    tokens: int
    """Tokens spent so far."""
    elapsed_seconds: float = Field(ge=0.0)
    """The run's own time so far."""
    refused: tuple[str, ...] = ()
    """`"key/id"` of proposals a human rejected in this run."""
    continuations: tuple[Continuation, ...] = ()
    """Where the run was interrupted and continued so far."""
    journal_length: int = Field(ge=0)
    """How many journal entries the run has."""
    journal_digest: str
    """The chain over those entries (see the class)."""
    signature: str | None = None
    """HMAC-SHA256 over the rest of the head (hex), with a signing key."""


@final
class EntryCounts(FrozenModel, frozen=True):
    """What one journal entry holds, by number: stored beside it (schema 8), so a page can
    find the entries that hold a key's n-th fact, or the facts at the end of a cycle, without
    reading the others."""

    cycle: int = Field(ge=0)
    """The last cycle the entry saved (the run's cycle when it was written)."""
    keys: tuple[tuple[KeyField, int], ...] = ()
    """How many facts of each key the entry adds, in key order (keys it adds none of are
    left out)."""


@final
@dataclass(frozen=True, slots=True)
class RunProgress:
    """One per-cycle save of a running run: its new head and what to append to its journal."""

    head: ProgressHead
    """The run's head after this save."""
    entry: str | None
    """The journal entry to append (JSON; `None` appends nothing)."""
    status: Literal[RunStatus.RUNNING, RunStatus.INTERRUPTED]
    """`RUNNING` while the run goes on; `INTERRUPTED` when its caller cancelled it."""
    lease_seconds: float
    """How long the run counts as running without another save or `renew_lease`."""
    restart: bool = False
    """Drop the journal (and any finished record) first: this entry starts it again."""
    counts: EntryCounts | None = None
    """What `entry` holds, by number, stored beside it (`None`: not known)."""


def failure_count(trace: RunTrace) -> int:
    """A run's calls that failed and were not made good (`RunTrace.failures`) plus its
    effects that a structural invariant rolled back (`RunTrace.rolled_back`)."""
    return len(trace.failures()) + len(trace.rolled_back())


@final
class RunSummary(FrozenModel, frozen=True):
    """One line about a stored run."""

    run_id: str
    """The run's id."""
    status: RunStatus
    """Where it stands (a running run whose lease ran out shows as `INTERRUPTED`)."""
    stop_reason: StopReason | None
    """How it ended; `None` while running or interrupted."""
    detail: str
    """The stop detail."""
    cycles: int
    """Cycles run."""
    fact_count: int
    """Facts in its context."""
    merkle_root: str
    """Its context's Merkle root (empty while running or interrupted)."""
    saved_at: datetime
    """When it was last saved (UTC)."""
    name: str | None = None
    """The formation's name, if recorded."""
    failures: int = 0
    """Its failed calls not made good and its rolled-back effects (`RunRecord.failure_count`);
    0 while running or interrupted. A run that converged with any converged with failures."""
    pending: int = 0
    """How many human gates it waits on (0 unless paused)."""
    parent_run_id: str | None = None
    """The run it was forked from, for a fork (once it stopped)."""
    fork_cycle: int | None = None
    """The parent's cycle it was forked at, for a fork."""

    @property
    def outcome(self) -> str:
        """The stop reason's value, or the status's while the run has none (`"running"`)."""
        return self.status.value if self.stop_reason is None else self.stop_reason.value


@final
class PendingGate(FrozenModel, frozen=True):
    """One gate a paused run waits on, as the store's inbox lists it.

    The inbox is the store's index of its paused records, not the signed record itself:
    `converge review RUN` checks the record before showing what to decide.
    """

    run_id: str
    """The paused run."""
    gate_id: str
    """The gate."""
    cycle: int
    """The cycle that held it."""
    ref: str
    """The held proposal's `"key/id"`."""
    suggestor: str
    """The suggestor that proposed it."""
    summary: str
    """What to show a reviewer: the proposal's content."""
    deadline: datetime | None = None
    """When the gate expires (UTC), or `None`."""
    saved_at: datetime
    """When the run paused (was last saved)."""
    name: str | None = None
    """The formation's name, if recorded."""


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

        It is the record the store holds, built once as the run stopped; `of` builds a
        record of any result, checking every fact again.
        """
        saved = result._saved  # pyright: ignore[reportPrivateUsage]
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


_UNSIGNED: Final = frozenset({"progress"})
"""Record fields the record's own signature leaves out (the head is signed by itself)."""


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

    async def save_progress(self, progress: RunProgress, /, *, expected_version: int) -> int:
        """Save one cycle of a running run atomically and return the run's new version.

        Writes `progress.head` and the status, appends `progress.entry` to the run's journal
        (after dropping the journal when `progress.restart`), and sets the lease to now plus
        `progress.lease_seconds`. `expected_version` works as for `save` (0: a new run).
        """
        ...

    async def renew_lease(self, run_id: str, /, *, version: int, lease_seconds: float) -> None:
        """Extend a running run's lease to now plus `lease_seconds`, keeping its version.

        Called from the engine's lease thread, in an event loop of its own, while the run's
        other calls go on in the run's loop: an implementation must allow that (the built-in
        stores do). Raises `StaleRecordError` when the run is no longer at `version`.
        """
        ...

    async def load(self, run_id: str, /) -> RunRecord:
        """The stored record with its `version` and `status`; raises `RunNotFoundError`.

        A running or interrupted run comes back assembled from its head and journal (see
        `converge.stores.assemble`), with `stop_reason=None` and its `checkpoint` the point
        to continue from.
        """
        ...

    async def list_runs(self, *, limit: int = 50) -> Sequence[RunSummary]:
        """The most recently saved runs first."""
        ...

    async def load_checkpoint(self, run_id: str, /) -> Checkpoint | None:
        """The pending checkpoint of a paused run, or `None` if it is not paused."""
        ...


@runtime_checkable
class RowStore(RunStore, Protocol):
    """A store that keeps a finished or paused run's journal as its rows (both built-in
    stores do).

    The engine ends or pauses a run saved after every cycle with `save_final` when its
    store has it, and with `save` otherwise; `converge show` and `verify` read such a run's
    head and a page of its rows at a time, `converge review` and the console's gate page a
    paused run's head.
    """

    async def save_final(self, final: RunFinal, /, *, expected_version: int) -> int:
        """Save a run's end or pause atomically and return its new version: write
        `final.head` as the run's row (and a paused run's pending gates), append
        `final.entry` to its journal, and keep the journal as its rows. `expected_version`
        works as for `save`."""
        ...

    async def load_head(self, run_id: str, /, *, paused: bool = False) -> RecordHead | None:
        """The head of a finished run stored as rows (or, with `paused`, of a paused one),
        with its `record.version`; `None` for any other run."""
        ...

    async def journal(
        self, run_id: str, /, *, after: int = 0, limit: int = 16
    ) -> list[tuple[int, str]]:
        """`(seq, entry)` of up to `limit` of the run's journal entries after `after`, in order."""
        ...

    async def entry_counts(self, run_id: str, /) -> list[tuple[int, str | None]]:
        """`(seq, counts)` of every journal entry of the run, in order, in one query: the
        `EntryCounts` JSON stored beside each (`None` for an entry written before schema 8)."""
        ...


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
