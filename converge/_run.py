"""One run of the loop: inputs at cycle 0, then cycles until a stop reason.

`Engine` builds a `RunLoop` per run (or resume) from its configuration and a frozen view of
its registrations, so registering more suggestors never disturbs a run in progress. The
state a pause must keep lives in `RunState`, which a `Checkpoint` serialises.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from time import perf_counter
from typing import final

import anyio

from ._budget import Budget
from ._checkpoint import Checkpoint, FactRecord, sign
from ._context import ContextSnapshot
from ._events import Observer
from ._executor import ErrorMode, Executor, Slot, failure
from ._hitl import GateDecision, GateRequest, HitlPolicy
from ._integrity import IntegrityProof
from ._invariant import Violation, check_invariants
from ._key import ContextKey, in_key_order
from ._log import run_logger
from ._merge import ConflictMode, Merger
from ._model import trusted
from ._promotion import PromotionPolicy
from ._proposal import ProposedFact
from ._registry import Registration, RegistryView
from ._result import Conflict, ConvergeResult
from ._run_events import RunEvents
from ._stop import StopReason
from ._trace import CycleTrace, Execution, Rejection, RunTrace

__all__ = ["HUMAN_SUGGESTOR_ID", "RunConfig", "RunLoop", "RunState"]


HUMAN_SUGGESTOR_ID = -2
"""The `suggestor_id` of facts written by human decisions (rejection diagnostics)."""


@final
@dataclass(frozen=True, slots=True)
class RunConfig:
    """The engine settings a run reads."""

    budget: Budget
    policy: PromotionPolicy
    on_conflict: ConflictMode
    on_suggestor_error: ErrorMode
    max_concurrency: int | None
    suggestor_timeout: float | None
    hitl: HitlPolicy | None
    clock: Callable[[], datetime]
    signing_key: bytes | None
    observers: tuple[Observer, ...] = ()
    record_effects: bool = False


@final
@dataclass(slots=True)
class RunState:
    """What a run carries from cycle to cycle, and across a pause."""

    run_id: str
    snapshot: ContextSnapshot
    initial_root: str
    inputs: tuple[ProposedFact, ...]
    cycle: int = 0
    dirty: frozenset[ContextKey] = frozenset()
    tokens: int = 0
    elapsed_before: float = 0.0
    refused: frozenset[tuple[ContextKey, str]] = frozenset()
    decisions: list[GateDecision] = field(default_factory=list[GateDecision])
    rejections: list[Rejection] = field(default_factory=list[Rejection])
    cycles: list[CycleTrace] = field(default_factory=list[CycleTrace])
    input_violations: tuple[Violation, ...] = ()


@final
class RunLoop:
    """Drives one run (or one resumed stretch of it) to a stop reason."""

    def __init__(self, config: RunConfig, view: RegistryView, state: RunState) -> None:
        self._config = config
        self._view = view
        self._state = state
        self._executor = Executor(
            max_concurrency=config.max_concurrency,
            timeout=config.suggestor_timeout,
            mode=config.on_suggestor_error,
            record_effects=config.record_effects,
        )
        self._log = run_logger(run_id=state.run_id)
        self._started = perf_counter()
        self.events = RunEvents(state.run_id, config.observers, self._log)

    @staticmethod
    def new_state(context: ContextSnapshot, inputs: tuple[ProposedFact, ...]) -> RunState:
        """The state of a run that has not started."""
        return RunState(uuid.uuid4().hex, context, context.merkle_root(), inputs)

    @property
    def state(self) -> RunState:
        """The live state."""
        return self._state

    @property
    def view(self) -> RegistryView:
        """The registrations this run uses."""
        return self._view

    # -- entry points ----------------------------------------------------------------------------

    async def start(self) -> ConvergeResult:
        """Merge the inputs at cycle 0, then loop."""
        self.started_event()
        result = self.merge_inputs()
        if result is None:
            result = await self._loop()
        await self.events.flush()
        return result

    async def loop(self) -> ConvergeResult:
        """Cycles from `state.cycle + 1` until a stop reason (after a resume)."""
        result = await self._loop()
        await self.events.flush()
        return result

    async def resume(
        self, pending: Sequence[GateRequest], decisions: Sequence[GateDecision]
    ) -> ConvergeResult:
        """Apply the decisions of a paused run, then continue its cycles."""
        self.started_event()
        self.apply_decisions(pending, decisions)
        return await self.loop()

    def started_event(self) -> None:
        state = self._state
        suggestors = len(self._view.registrations)
        self._log.info(
            "run_started",
            suggestors=suggestors,
            inputs=len(state.inputs),
            facts=len(state.snapshot),
        )
        self.events.run_started(state.cycle, suggestors, len(state.inputs), len(state.snapshot))

    def merge_inputs(self) -> ConvergeResult | None:
        state = self._state
        merger = self.merger(state.snapshot, 0, gate="input", hitl=False)
        conflict = merger.merge("input", -1, None, state.inputs)
        state.snapshot = merger.snapshot()
        state.rejections.extend(merger.rejections)
        state.input_violations = tuple(merger.violations)
        self.events.merged(0, merger.promoted, merger.rejections, (), merger.violations)
        for violation in merger.violations:
            self._log_violation(violation)
        if conflict is not None:
            return self.finish(StopReason.CONFLICT, conflict.describe(), conflict)
        stop = self._budget_stop()
        if stop is not None:
            return self.finish(*stop)
        state.dirty = merger.added_keys or frozenset(state.snapshot.keys())
        return None

    def apply_decisions(
        self, pending: Sequence[GateRequest], decisions: Sequence[GateDecision]
    ) -> None:
        """Merge the humans' decisions as the paused cycle's last effects."""
        state = self._state
        cycle = state.cycle
        refused = set(state.refused)
        approvals = self.merger(state.snapshot, cycle, gate="human", hitl=False, mode="reject")
        by_gate = {decision.gate_id: decision for decision in decisions}
        for request in pending:
            decision = by_gate[request.gate_id]
            state.decisions.append(decision)
            proposal = request.proposal
            if decision.approved:
                approvals.merge(
                    request.suggestor,
                    request.suggestor_id,
                    None,
                    (proposal,),
                    approved_by=decision.by,
                )
            else:
                refused.add((proposal.key, proposal.id))
                reason = decision.reason or "no reason provided"
                note = ProposedFact(
                    key=ContextKey.DIAGNOSTIC,
                    id=f"hitl-rejected:{proposal.id}",
                    content=(
                        f"HITL gate rejected proposal '{proposal.id}' by {decision.by}: {reason}"
                    ),
                    provenance=f"human:{decision.by}",
                    evidence=tuple(proposal.evidence),
                )
                approvals.merge("human", HUMAN_SUGGESTOR_ID, None, (note,), approved_by=decision.by)
            self._log.info(
                "gate_decided",
                gate_id=request.gate_id,
                approved=decision.approved,
                by=decision.by,
            )
            self.events.gate_decided(cycle, request.gate_id, decision.approved, decision.by)
        self.events.merged(
            cycle, approvals.promoted, approvals.rejections, (), approvals.violations
        )
        state.snapshot = approvals.snapshot()
        state.rejections.extend(approvals.rejections)
        state.refused = frozenset(refused)
        state.dirty = state.dirty | approvals.added_keys
        if state.cycles:
            last = state.cycles[-1]
            state.cycles[-1] = last.model_copy(
                update={
                    "promoted": last.promoted + tuple(f.ref for f in approvals.promoted),
                    "rejected": last.rejected + tuple(approvals.rejections),
                    "violations": last.violations + tuple(approvals.violations),
                }
            )

    # -- the loop --------------------------------------------------------------------------------

    async def _loop(self) -> ConvergeResult:
        state = self._state
        budget = self._config.budget
        view = self._view
        while True:
            await self.events.flush()
            state.cycle += 1
            cycle = state.cycle
            if cycle > budget.max_cycles:
                state.cycle = budget.max_cycles
                detail = f"max_cycles ({budget.max_cycles})"
                return self.finish(StopReason.CYCLE_BUDGET_EXHAUSTED, detail)
            dirty = state.dirty
            snapshot = state.snapshot
            self._log.debug("cycle_started", cycle=cycle, dirty=dirty)
            if self.events.active:
                self.events.cycle_started(cycle, dirty)
                await self.events.flush()
            eligible, refused = self._eligible(view.candidates(dirty), snapshot)
            if not eligible:
                self.record(cycle, dirty, eligible, self._executions(refused, ()), None)
                return self.fixed_point()

            slots, timed_out = await self._execute(eligible, snapshot)
            if timed_out:
                for slot in slots:
                    if slot.effect is not None:
                        state.tokens += slot.effect.tokens
                    elif slot.execution is not None:
                        state.tokens += slot.execution.tokens
                executions = self._executions(refused, slots, cancelled=True)
                self.record(cycle, dirty, eligible, executions, None, merged=False)
                return self.finish(StopReason.TIME_BUDGET_EXHAUSTED, self._time_detail())

            merger = self.merger(snapshot, cycle)
            conflict: Conflict | None = None
            for slot in slots:
                effect = slot.effect
                if effect is None:
                    if slot.execution is not None:
                        state.tokens += slot.execution.tokens
                    continue
                state.tokens += effect.tokens
                reg = slot.reg
                conflict = merger.merge(reg.name, int(reg.id), reg.writes, effect.proposals)
                if conflict is not None:
                    break
            state.snapshot = merger.snapshot()
            state.rejections.extend(merger.rejections)
            executions = self._executions(refused, slots)
            if conflict is not None:
                self.record(cycle, dirty, eligible, executions, merger)
                return self.finish(StopReason.CONFLICT, conflict.describe(), conflict)

            stop = self._budget_stop()
            if stop is not None:
                self.record(cycle, dirty, eligible, executions, merger)
                return self.finish(*stop)
            if merger.held:
                state.dirty = merger.added_keys
                self.record(cycle, dirty, eligible, executions, merger)
                return self.pause(merger.held)
            if not merger.promoted:
                self.record(cycle, dirty, eligible, executions, merger)
                return self.fixed_point()
            semantic = check_invariants(view.semantic, state.snapshot, cycle)
            self.record(cycle, dirty, eligible, executions, merger, semantic)
            state.dirty = merger.added_keys

    # -- phases ------------------------------------------------------------------------------------

    def merger(
        self,
        snapshot: ContextSnapshot,
        cycle: int,
        *,
        gate: str = "engine",
        hitl: bool = True,
        mode: ConflictMode | None = None,
    ) -> Merger:
        config = self._config
        policy = config.hitl if hitl else None
        deadline = None
        if policy is not None and policy.timeout is not None:
            deadline = config.clock() + policy.timeout
        return Merger(
            snapshot,
            cycle=cycle,
            policy=config.policy,
            mode=config.on_conflict if mode is None else mode,
            gate="input" if gate == "input" else "human" if gate == "human" else "engine",
            refused=self._state.refused,
            structural=self._view.structural,
            hitl=policy,
            deadline=deadline,
        )

    def _eligible(
        self, candidates: Sequence[Registration], snapshot: ContextSnapshot
    ) -> tuple[list[Registration], list[Execution]]:
        """Candidates whose `accepts` is true; failed `accepts` calls become executions."""
        eligible: list[Registration] = []
        refused: list[Execution] = []
        raise_errors = self._config.on_suggestor_error == "raise"
        for reg in candidates:
            try:
                verdict = reg.suggestor.accepts(snapshot)
            except Exception as error:
                if raise_errors:
                    raise
                # accepts calls are not timed: timing each costs as much as a cheap accepts
                refused.append(failure(reg, "failed", perf_counter(), error, phase="accepts"))
                continue
            if verdict is True:
                eligible.append(reg)
            elif verdict is not False:
                error = TypeError(
                    f"accepts() of {reg.name!r} returned {type(verdict).__name__}, expected bool"
                )
                if raise_errors:
                    raise error
                refused.append(failure(reg, "failed", perf_counter(), error, phase="accepts"))
        return eligible, refused

    async def _execute(
        self, eligible: Sequence[Registration], snapshot: ContextSnapshot
    ) -> tuple[list[Slot], bool]:
        """Run the eligible suggestors; report whether the time budget cancelled them."""
        slots = [Slot(reg) for reg in eligible]
        remaining = self._remaining_seconds()
        if remaining is None:
            await self._executor.run(slots, snapshot)
            return slots, False
        with anyio.move_on_after(max(remaining, 0.0)) as scope:
            await self._executor.run(slots, snapshot)
        return slots, scope.cancelled_caught

    def _elapsed(self) -> float:
        return self._state.elapsed_before + (perf_counter() - self._started)

    def _remaining_seconds(self) -> float | None:
        limit = self._config.budget.max_seconds
        return None if limit is None else limit - self._elapsed()

    def _budget_stop(self) -> tuple[StopReason, str] | None:
        budget = self._config.budget
        state = self._state
        facts = len(state.snapshot)
        if facts > budget.max_facts:
            return StopReason.FACT_BUDGET_EXHAUSTED, f"max_facts ({facts} > {budget.max_facts})"
        if budget.max_tokens is not None and state.tokens > budget.max_tokens:
            return (
                StopReason.TOKEN_BUDGET_EXHAUSTED,
                f"max_tokens ({state.tokens} > {budget.max_tokens})",
            )
        remaining = self._remaining_seconds()
        if remaining is not None and remaining < 0:
            return StopReason.TIME_BUDGET_EXHAUSTED, self._time_detail()
        return None

    def _time_detail(self) -> str:
        return f"max_seconds ({self._elapsed():.3f} > {self._config.budget.max_seconds})"

    def fixed_point(self) -> ConvergeResult:
        """Acceptance and semantic invariants decide between converged and violated."""
        state = self._state
        view = self._view
        checks = (*view.semantic, *view.acceptance)
        if not checks:
            return self.finish(StopReason.CONVERGED, "fixed point reached")
        violations = check_invariants(checks, state.snapshot, state.cycle)
        if not violations:
            return self.finish(StopReason.CONVERGED, "fixed point reached")
        if state.cycles and state.cycles[-1].cycle == state.cycle:
            last = state.cycles[-1]
            known = set(last.violations)
            fresh = tuple(v for v in violations if v not in known)
            state.cycles[-1] = last.model_copy(update={"violations": last.violations + fresh})
        for violation in violations:
            self._log_violation(violation)
        self.events.merged(state.cycle, violations=violations)
        detail = "; ".join(f"{v.invariant}: {v.reason}" for v in violations)
        return self.finish(StopReason.INVARIANT_VIOLATED, detail)

    def pause(self, held: list[GateRequest]) -> ConvergeResult:
        state = self._state
        for request in held:
            self._log.info(
                "gate_requested",
                gate_id=request.gate_id,
                suggestor=request.suggestor,
                cycle=request.cycle,
            )
        snapshot = state.snapshot
        registrations, invariants = self._view.fingerprint
        checkpoint = Checkpoint(
            run_id=state.run_id,
            registrations=registrations,
            invariants=invariants,
            facts=tuple(FactRecord.of(fact) for fact in snapshot.facts()),
            merkle_root=snapshot.merkle_root(),
            clock=snapshot.clock,
            version=snapshot.version,
            cycle=state.cycle,
            dirty=in_key_order(state.dirty),
            tokens=state.tokens,
            elapsed_seconds=self._elapsed(),
            refused=tuple(f"{key.value}/{ident}" for key, ident in sorted(state.refused)),
            pending=tuple(held),
            decisions=tuple(state.decisions),
            rejections=tuple(state.rejections),
            cycles=tuple(state.cycles),
            inputs=state.inputs,
            input_violations=state.input_violations,
            initial_root=state.initial_root,
        )
        checkpoint = sign(checkpoint, self._config.signing_key)
        gates = ", ".join(request.gate_id for request in held)
        return self.finish(
            StopReason.AWAITING_HUMAN,
            f"{len(held)} proposal(s) awaiting a human: {gates}",
            pending=tuple(held),
            checkpoint=checkpoint,
        )

    # -- records -----------------------------------------------------------------------------------

    def _executions(
        self, refused: list[Execution], slots: Sequence[Slot], *, cancelled: bool = False
    ) -> tuple[Execution, ...]:
        done: list[Execution] = list(refused)
        for slot in slots:
            if slot.execution is not None:
                done.append(slot.execution)
            elif cancelled:
                done.append(
                    failure(
                        slot.reg, "timed_out", self._started, "cancelled: time budget exhausted"
                    )
                )
        if refused:
            done.sort(key=lambda execution: execution.suggestor_id)
        for execution in done:
            if execution.outcome != "ok":
                self._log.warning(
                    "suggestor_failed",
                    suggestor=execution.suggestor,
                    phase=execution.phase,
                    outcome=execution.outcome,
                    error=execution.error,
                )
        return tuple(done)

    def record(
        self,
        cycle: int,
        dirty: frozenset[ContextKey],
        eligible: Sequence[Registration],
        executions: tuple[Execution, ...],
        merger: Merger | None,
        semantic: Sequence[Violation] = (),
        *,
        merged: bool = True,
    ) -> None:
        if merger is None:
            promoted: tuple[str, ...] = ()
            rejected: tuple[Rejection, ...] = ()
            held: tuple[str, ...] = ()
            violations: tuple[Violation, ...] = tuple(semantic)
        else:
            promoted = tuple(fact.ref for fact in merger.promoted)
            rejected = tuple(merger.rejections)
            held = tuple(request.gate_id for request in merger.held)
            violations = (*merger.violations, *semantic)
        for violation in violations:
            self._log_violation(violation)
        events = self.events
        if events.active:
            events.executions(cycle, executions)
            if merger is not None:
                events.merged(cycle, merger.promoted, merger.rejections, merger.held, violations)
            else:
                events.merged(cycle, violations=violations)
            facts = len(self._state.snapshot)
            events.cycle_finished(
                cycle, len(eligible), len(promoted), len(rejected), len(held), facts
            )
        self._state.cycles.append(
            trusted(
                CycleTrace,
                {
                    "cycle": cycle,
                    "dirty": in_key_order(dirty),
                    "eligible": tuple(reg.name for reg in eligible),
                    "executions": executions,
                    "promoted": promoted,
                    "rejected": rejected,
                    "held": held,
                    "violations": violations,
                    "merged": merged,
                },
            )
        )
        self._log.debug(
            "cycle_finished",
            cycle=cycle,
            eligible=len(eligible),
            promoted=len(promoted),
            rejected=len(rejected),
        )

    def _log_violation(self, violation: Violation) -> None:
        self._log.warning(
            "invariant_violated",
            invariant=violation.invariant,
            invariant_class=violation.invariant_class.value,
            cycle=violation.cycle,
            reason=violation.reason,
        )

    def finish(
        self,
        reason: StopReason,
        detail: str,
        conflict: Conflict | None = None,
        *,
        pending: tuple[GateRequest, ...] = (),
        checkpoint: Checkpoint | None = None,
    ) -> ConvergeResult:
        state = self._state
        snapshot = state.snapshot
        proof = IntegrityProof.of(snapshot)
        trace = trusted(
            RunTrace,
            {
                "run_id": state.run_id,
                "inputs": state.inputs,
                "initial_root": state.initial_root,
                "cycles": tuple(state.cycles),
                "decisions": tuple(state.decisions),
                "input_violations": state.input_violations,
                "stop_reason": reason,
                "detail": detail,
                "final_root": proof.merkle_root,
            },
        )
        self._log.info(
            "run_finished",
            stop_reason=reason.value,
            detail=detail,
            cycles=state.cycle,
            facts=proof.fact_count,
            tokens=state.tokens,
            merkle_root=proof.merkle_root,
            elapsed_ms=round(self._elapsed() * 1000.0, 3),
        )
        self.events.run_finished(state.cycle, reason.value, detail, proof, state.tokens)
        return ConvergeResult(
            stop_reason=reason,
            detail=detail,
            cycles=state.cycle,
            context=snapshot,
            integrity=proof,
            trace=trace,
            rejections=tuple(state.rejections),
            tokens=state.tokens,
            run_id=state.run_id,
            conflict=conflict,
            pending=pending,
            checkpoint=checkpoint,
        )
