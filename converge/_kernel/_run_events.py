"""The events one run emits: the run's one narration channel.

Each event goes to two consumers: the observers (buffered, delivered between phases on
`flush`) and the log (`_log.EventLog`, written at once). An event is built only when one of
them wants it: an observer listens, or the logger writes the event's level.

A run with a time budget delivers under it (`deliver_within`): an observer still busy when the
time is up is cut off, logged as `observer_timed_out`, and hears nothing more of the run.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Final, final

from .._core._context import ContextSnapshot
from .._core._events import (
    EVENT_TYPES,
    CycleFinished,
    CycleStarted,
    EngineEvent,
    FactPromoted,
    GateDecided,
    GateRequested,
    InvariantViolated,
    Observer,
    ProposalRejected,
    RunFinished,
    RunStarted,
    SuggestorBlocked,
    SuggestorFailed,
    SuggestorFinished,
    deliver,
    wanted,
)
from .._core._fact import Fact
from .._core._hitl import GateRequest
from .._core._integrity import IntegrityProof
from .._core._invariant import Violation
from .._core._key import AnyKey, in_key_order
from .._core._shortfall import invalid
from .._core._stop import StopReason
from .._core._trace import Execution, Rejection
from ._log import EVENT_LEVELS, EventLog

__all__ = ["FINAL_GRACE", "RunEvents"]

_LEVELS: Final = {
    **EVENT_LEVELS,
    "fact_promoted": logging.DEBUG,
    "proposal_rejected": logging.DEBUG,
    "suggestor_finished": logging.DEBUG,
}
"""The level of each event type: where the log has one, else debug (observers only)."""

FINAL_GRACE: Final = 1.0
"""Seconds the last delivery of a run (with `run_finished`) gets at least, even when the run's
time budget is spent: a run stopped by its time budget still tells its observers so."""


@final
class RunEvents:
    """Builds a run's events for whoever wants them: observers on `flush`, the log at once."""

    __slots__ = (
        "_finished",
        "_log",
        "_observed",
        "_observers",
        "_remaining",
        "_run_id",
        "calls",
        "debug",
        "facts",
        "info",
        "pending",
        "rejected",
        "warn",
    )

    def __init__(self, run_id: str, observers: tuple[Observer, ...], log: EventLog) -> None:
        self._run_id = run_id
        self._log = log
        self.pending: list[EngineEvent] = []
        """The events waiting for the observers (`flush` delivers them); read, never changed,
        outside this class."""
        self._remaining: Callable[[], float | None] | None = None
        self._finished = False
        self._listen(tuple((observer, wanted(observer)) for observer in observers))

    def _listen(self, observers: tuple[tuple[Observer, frozenset[str] | None], ...]) -> None:
        """Who hears what: each observer with the event types it wants (`None`: all)."""
        self._observers = observers
        self._observed = bool(observers)
        types: set[str] = set()
        for _, wants in observers:
            types |= EVENT_TYPES if wants is None else wants
        lowest = min((_LEVELS[kind] for kind in types), default=logging.CRITICAL + 10)
        lowest = min(lowest, self._log.threshold)
        self.debug = lowest <= logging.DEBUG
        """Whether anyone wants debug-level events (per cycle, per fact)."""
        self.info = lowest <= logging.INFO
        """Whether anyone wants info-level events (run and gate milestones)."""
        self.warn = lowest <= logging.WARNING
        """Whether anyone wants warning-level events (failures, violations)."""
        self.facts = "fact_promoted" in types
        """Whether an observer wants an event per promoted fact (never logged)."""
        self.rejected = "proposal_rejected" in types
        """Whether an observer wants an event per rejection (never logged)."""
        self.calls = "suggestor_finished" in types
        """Whether an observer wants an event per successful call (never logged)."""

    def _emit(self, event: EngineEvent) -> None:
        if self._observed:
            self.pending.append(event)
        self._log.write(event)

    def deliver_within(self, remaining: Callable[[], float | None], /) -> None:
        """Deliver from now on within the seconds `remaining()` gives (the run's time left)."""
        self._remaining = remaining

    async def flush(self) -> None:
        """Deliver what is buffered; the run waits for its observers here, between phases."""
        if not self.pending:
            return
        events, self.pending = self.pending, []
        remaining = None if self._remaining is None else self._remaining()
        if remaining is None:
            await deliver(self._observers, events, self._failed)
            return
        timeout = max(remaining, FINAL_GRACE) if self._finished else max(remaining, 0.0)
        cut = await deliver(self._observers, events, self._failed, timeout)
        if cut is not None:
            observer, event = cut
            self._listen(tuple(kept for kept in self._observers if kept[0] is not observer))
            self._log.warning(
                "observer_timed_out",
                observer=type(observer).__name__,
                event_type=event.type,
                seconds=round(timeout, 3),
            )

    def suggestor_blocked(self, cycle: int, suggestor: str, held: float) -> None:
        """A suggestor held the event loop past its time limit (its result was dropped)."""
        self._emit(
            SuggestorBlocked(
                run_id=self._run_id,
                cycle=cycle,
                suggestor=suggestor,
                held_seconds=round(held, 3),
            )
        )

    def retry_scheduled(self, cycle: int, execution: Execution, attempt: int) -> None:
        """A failed call will be tried again (logged; observers see the failure itself)."""
        self._log.warning(
            "suggestor_retry_scheduled",
            cycle=cycle,
            suggestor=execution.suggestor,
            outcome=execution.outcome,
            error=execution.error,
            next_attempt=attempt,
        )

    def invalid(self, cycle: int, rejected: Sequence[Rejection]) -> None:
        """Log each rejection of a broken proposal (`_shortfall.invalid`), a failure of its
        suggestor's; observers hear of every rejection at debug level (`merged`)."""
        if not self.warn:
            return
        for rejection in rejected:
            if invalid(rejection):
                self._log.warning(
                    "proposal_invalid",
                    cycle=cycle,
                    suggestor=rejection.suggestor,
                    ref=rejection.proposal.ref,
                    reason=rejection.reason,
                )

    def _failed(self, observer: Observer, event: EngineEvent, error: Exception) -> None:
        self._log.warning(
            "observer_failed",
            observer=type(observer).__name__,
            event_type=event.type,
            error=f"{type(error).__name__}: {error}",
        )

    def run_started(self, cycle: int, suggestors: int, inputs: int, facts: int) -> None:
        if self.info:
            self._emit(
                RunStarted(
                    run_id=self._run_id,
                    cycle=cycle,
                    suggestors=suggestors,
                    inputs=inputs,
                    facts=facts,
                )
            )

    def cycle_started(self, cycle: int, dirty: frozenset[AnyKey]) -> None:
        if self.debug:
            ordered = in_key_order(dirty)
            self._emit(CycleStarted(run_id=self._run_id, cycle=cycle, dirty=ordered))

    def executions(self, cycle: int, executions: Sequence[Execution]) -> None:
        if not self.warn:
            return
        calls = self.calls
        for execution in executions:
            if execution.outcome == "ok":
                if not calls:
                    continue
                self._emit(
                    SuggestorFinished(
                        run_id=self._run_id,
                        cycle=cycle,
                        suggestor=execution.suggestor,
                        suggestor_id=execution.suggestor_id,
                        duration_ms=execution.duration_ms,
                        proposals=execution.proposals,
                        tokens=execution.tokens,
                        metadata=execution.metadata,
                    )
                )
            else:
                self._emit(
                    SuggestorFailed(
                        run_id=self._run_id,
                        cycle=cycle,
                        suggestor=execution.suggestor,
                        suggestor_id=execution.suggestor_id,
                        phase=execution.phase,
                        outcome=execution.outcome,
                        error=execution.error or "",
                        metadata=execution.metadata,
                    )
                )

    def merged(
        self,
        cycle: int,
        promoted: Sequence[Fact] = (),
        rejected: Sequence[Rejection] = (),
        held: Sequence[GateRequest] = (),
        violations: Sequence[Violation] = (),
    ) -> None:
        if not self.warn:
            return
        run_id = self._run_id
        if not self.facts:
            promoted = ()
        if not self.rejected:
            rejected = ()
        if not self.info:
            held = ()
        for fact in promoted:
            record = fact.promotion
            self._emit(
                FactPromoted(
                    run_id=run_id,
                    cycle=cycle,
                    ref=fact.ref,
                    suggestor=record.suggestor,
                    clock=record.clock,
                    gate=record.gate,
                    digest=fact.digest,
                )
            )
        for rejection in rejected:
            self._emit(
                ProposalRejected(
                    run_id=run_id,
                    cycle=cycle,
                    ref=rejection.proposal.ref,
                    suggestor=rejection.suggestor,
                    reason=rejection.reason,
                )
            )
        for request in held:
            self._emit(
                GateRequested(
                    run_id=run_id,
                    cycle=cycle,
                    gate_id=request.gate_id,
                    ref=request.proposal.ref,
                    suggestor=request.suggestor,
                )
            )
        for violation in violations:
            self._emit(
                InvariantViolated(
                    run_id=run_id,
                    cycle=violation.cycle,
                    invariant=violation.invariant,
                    invariant_class=violation.invariant_class,
                    reason=violation.reason,
                )
            )

    def cycle_finished(
        self,
        cycle: int,
        eligible: int,
        promoted: Sequence[Fact],
        rejected: int,
        held: int,
        facts: int,
    ) -> None:
        if self.debug:
            gained = Counter(fact.key for fact in promoted)
            self._emit(
                CycleFinished(
                    run_id=self._run_id,
                    cycle=cycle,
                    eligible=eligible,
                    promoted=len(promoted),
                    rejected=rejected,
                    held=held,
                    facts=facts,
                    by_key=tuple((key, gained[key]) for key in in_key_order(gained)),
                )
            )

    def gate_decided(self, cycle: int, gate_id: str, approved: bool, by: str) -> None:
        if self.info:
            self._emit(
                GateDecided(
                    run_id=self._run_id, cycle=cycle, gate_id=gate_id, approved=approved, by=by
                )
            )

    def run_finished(
        self,
        cycle: int,
        stop_reason: StopReason,
        detail: str,
        snapshot: ContextSnapshot,
        tokens: int,
    ) -> IntegrityProof | None:
        """Narrate the run's end; the proof of `snapshot` if this built it (someone listens
        at info level), for the result to keep, else `None` (nobody has read it yet)."""
        self._finished = True
        proof = None
        if self.info:
            proof = IntegrityProof.of(snapshot)  # only when someone listens: it hashes the tree
            self._emit(
                RunFinished(
                    run_id=self._run_id,
                    cycle=cycle,
                    stop_reason=str(stop_reason),  # its value (`.value` runs enum's Python code)
                    detail=detail,
                    facts=proof.fact_count,
                    merkle_root=proof.merkle_root,
                    tokens=tokens,
                )
            )
        return proof
