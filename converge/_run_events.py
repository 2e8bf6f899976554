"""The events one run emits, buffered between phases and delivered to its observers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

from structlog.typing import FilteringBoundLogger

from ._events import (
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
    SuggestorFailed,
    SuggestorFinished,
    deliver,
)
from ._fact import Fact
from ._hitl import GateRequest
from ._integrity import IntegrityProof
from ._invariant import Violation
from ._key import ContextKey, in_key_order
from ._trace import Execution, Rejection

__all__ = ["RunEvents"]


@final
class RunEvents:
    """Builds a run's events (only when someone observes) and delivers them on `flush`."""

    __slots__ = ("_buffer", "_log", "_observers", "_run_id", "active")

    def __init__(
        self, run_id: str, observers: tuple[Observer, ...], log: FilteringBoundLogger
    ) -> None:
        self._run_id = run_id
        self._observers = observers
        self._log = log
        self._buffer: list[EngineEvent] = []
        self.active = bool(observers)
        """Whether any observer listens; nothing is built otherwise."""

    async def flush(self) -> None:
        """Deliver what is buffered; the run waits for its observers here, between phases."""
        if not self._buffer:
            return
        events, self._buffer = self._buffer, []
        await deliver(self._observers, events, self._failed)

    def _failed(self, observer: Observer, event: EngineEvent, error: Exception) -> None:
        self._log.warning(
            "observer_failed",
            observer=type(observer).__name__,
            event_type=event.type,
            error=f"{type(error).__name__}: {error}",
        )

    def run_started(self, cycle: int, suggestors: int, inputs: int, facts: int) -> None:
        if self.active:
            self._buffer.append(
                RunStarted(
                    run_id=self._run_id,
                    cycle=cycle,
                    suggestors=suggestors,
                    inputs=inputs,
                    facts=facts,
                )
            )

    def cycle_started(self, cycle: int, dirty: frozenset[ContextKey]) -> None:
        if self.active:
            ordered = in_key_order(dirty)
            self._buffer.append(CycleStarted(run_id=self._run_id, cycle=cycle, dirty=ordered))

    def executions(self, cycle: int, executions: Sequence[Execution]) -> None:
        if not self.active:
            return
        for execution in executions:
            if execution.outcome == "ok":
                self._buffer.append(
                    SuggestorFinished(
                        run_id=self._run_id,
                        cycle=cycle,
                        suggestor=execution.suggestor,
                        suggestor_id=execution.suggestor_id,
                        duration_ms=execution.duration_ms,
                        proposals=execution.proposals,
                        tokens=execution.tokens,
                    )
                )
            else:
                self._buffer.append(
                    SuggestorFailed(
                        run_id=self._run_id,
                        cycle=cycle,
                        suggestor=execution.suggestor,
                        suggestor_id=execution.suggestor_id,
                        phase=execution.phase,
                        outcome=execution.outcome,
                        error=execution.error or "",
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
        if not self.active:
            return
        run_id = self._run_id
        buffer = self._buffer
        for fact in promoted:
            record = fact.promotion
            buffer.append(
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
            buffer.append(
                ProposalRejected(
                    run_id=run_id,
                    cycle=cycle,
                    ref=rejection.proposal.ref,
                    suggestor=rejection.suggestor,
                    reason=rejection.reason,
                )
            )
        for request in held:
            buffer.append(
                GateRequested(
                    run_id=run_id,
                    cycle=cycle,
                    gate_id=request.gate_id,
                    ref=request.proposal.ref,
                    suggestor=request.suggestor,
                )
            )
        for violation in violations:
            buffer.append(
                InvariantViolated(
                    run_id=run_id,
                    cycle=violation.cycle,
                    invariant=violation.invariant,
                    invariant_class=violation.invariant_class,
                    reason=violation.reason,
                )
            )

    def cycle_finished(
        self, cycle: int, eligible: int, promoted: int, rejected: int, held: int, facts: int
    ) -> None:
        if self.active:
            self._buffer.append(
                CycleFinished(
                    run_id=self._run_id,
                    cycle=cycle,
                    eligible=eligible,
                    promoted=promoted,
                    rejected=rejected,
                    held=held,
                    facts=facts,
                )
            )

    def gate_decided(self, cycle: int, gate_id: str, approved: bool, by: str) -> None:
        if self.active:
            self._buffer.append(
                GateDecided(
                    run_id=self._run_id, cycle=cycle, gate_id=gate_id, approved=approved, by=by
                )
            )

    def run_finished(
        self, cycle: int, stop_reason: str, detail: str, proof: IntegrityProof, tokens: int
    ) -> None:
        if self.active:
            self._buffer.append(
                RunFinished(
                    run_id=self._run_id,
                    cycle=cycle,
                    stop_reason=stop_reason,
                    detail=detail,
                    facts=proof.fact_count,
                    merkle_root=proof.merkle_root,
                    tokens=tokens,
                )
            )
