"""One run of the loop: inputs at cycle 0, then cycles until a stop reason.

`Engine` builds a `RunLoop` per run from its configuration and a frozen view of its
registrations, so registering more suggestors never disturbs a run in progress.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import final

import anyio

from ._budget import Budget
from ._context import ContextSnapshot
from ._executor import ErrorMode, Executor, Slot, failure
from ._integrity import IntegrityProof
from ._key import ContextKey
from ._log import run_logger
from ._merge import ConflictMode, Merger
from ._model import trusted
from ._promotion import PromotionPolicy
from ._proposal import ProposedFact
from ._registry import Registration, RegistryView
from ._result import Conflict, ConvergeResult, StopReason
from ._trace import CycleTrace, Execution, Rejection, RunTrace

__all__ = ["RunConfig", "RunLoop"]


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


@final
class RunLoop:
    """The state of one run, from cycle 0 to its stop reason."""

    def __init__(self, config: RunConfig, view: RegistryView) -> None:
        self._config = config
        self._view = view
        self._executor = Executor(
            max_concurrency=config.max_concurrency,
            timeout=config.suggestor_timeout,
            mode=config.on_suggestor_error,
        )
        self.run_id = uuid.uuid4().hex
        self._log = run_logger(run_id=self.run_id)
        self._cycles: list[CycleTrace] = []
        self._rejections: list[Rejection] = []
        self._tokens = 0
        self._started = 0.0
        self._inputs: tuple[ProposedFact, ...] = ()
        self._initial_root = ""

    # -- the loop ------------------------------------------------------------------------------

    async def run(
        self, context: ContextSnapshot, inputs: tuple[ProposedFact, ...]
    ) -> ConvergeResult:
        self._started = perf_counter()
        self._inputs = inputs
        self._initial_root = context.merkle_root()
        budget = self._config.budget
        self._log.info(
            "run_started",
            suggestors=len(self._view.registrations),
            inputs=len(inputs),
            facts=len(context),
        )

        merger = self._merger(context, 0, gate="input")
        conflict = merger.merge("input", -1, None, inputs)
        snapshot = merger.snapshot()
        self._rejections.extend(merger.rejections)
        if conflict is not None:
            return self._finish(snapshot, StopReason.CONFLICT, conflict.describe(), 0, conflict)
        dirty = merger.added_keys or frozenset(snapshot.keys())

        cycle = 0
        while True:
            cycle += 1
            if cycle > budget.max_cycles:
                detail = f"max_cycles ({budget.max_cycles})"
                return self._finish(
                    snapshot, StopReason.CYCLE_BUDGET_EXHAUSTED, detail, budget.max_cycles
                )
            self._log.debug("cycle_started", cycle=cycle, dirty=sorted(dirty))
            eligible, refused = self._eligible(self._view.candidates(dirty), snapshot)
            if not eligible:
                self._record(cycle, dirty, eligible, refused, (), ())
                return self._fixed_point(snapshot, cycle)

            slots, timed_out = await self._execute(eligible, snapshot)
            if timed_out:
                self._tokens += sum(slot.effect.tokens for slot in slots if slot.effect is not None)
                executions = self._executions(refused, slots, cancelled=True)
                self._record_trace(cycle, dirty, eligible, executions, (), ())
                return self._finish(
                    snapshot, StopReason.TIME_BUDGET_EXHAUSTED, self._time_detail(), cycle
                )

            merger = self._merger(snapshot, cycle)
            conflict: Conflict | None = None
            for slot in slots:
                effect = slot.effect
                if effect is None:
                    continue
                self._tokens += effect.tokens
                reg = slot.reg
                conflict = merger.merge(reg.name, int(reg.id), reg.writes, effect.proposals)
                if conflict is not None:
                    break
            snapshot = merger.snapshot()
            self._rejections.extend(merger.rejections)
            self._record(cycle, dirty, eligible, refused, slots, merger)
            if conflict is not None:
                return self._finish(
                    snapshot, StopReason.CONFLICT, conflict.describe(), cycle, conflict
                )

            stop = self._budget_stop(snapshot)
            if stop is not None:
                return self._finish(snapshot, stop[0], stop[1], cycle)
            if not merger.promoted:
                return self._fixed_point(snapshot, cycle)
            dirty = merger.added_keys

    # -- phases ------------------------------------------------------------------------------------

    def _merger(self, snapshot: ContextSnapshot, cycle: int, *, gate: str = "engine") -> Merger:
        return Merger(
            snapshot,
            cycle=cycle,
            policy=self._config.policy,
            mode=self._config.on_conflict,
            gate="input" if gate == "input" else "engine",
        )

    def _eligible(
        self, candidates: Sequence[Registration], snapshot: ContextSnapshot
    ) -> tuple[list[Registration], list[Execution]]:
        """Candidates whose `accepts` is true; failed `accepts` calls become executions."""
        eligible: list[Registration] = []
        refused: list[Execution] = []
        raise_errors = self._config.on_suggestor_error == "raise"
        for reg in candidates:
            started = perf_counter()
            try:
                verdict = reg.suggestor.accepts(snapshot)
            except Exception as error:
                if raise_errors:
                    raise
                refused.append(failure(reg, "failed", started, error, phase="accepts"))
                self._log.warning(
                    "suggestor_failed", suggestor=reg.name, phase="accepts", error=str(error)
                )
                continue
            if verdict is True:
                eligible.append(reg)
            elif verdict is not False:
                error = TypeError(
                    f"accepts() of {reg.name!r} returned {type(verdict).__name__}, expected bool"
                )
                if raise_errors:
                    raise error
                refused.append(failure(reg, "failed", started, error, phase="accepts"))
        return eligible, refused

    async def _execute(
        self, eligible: Sequence[Registration], snapshot: ContextSnapshot
    ) -> tuple[list[Slot], bool]:
        """Run the eligible suggestors; report whether the time budget cancelled them."""
        remaining = self._remaining_seconds()
        if remaining is None:
            return await self._executor.run(eligible, snapshot), False
        slots: list[Slot] = [Slot(reg) for reg in eligible]
        with anyio.move_on_after(max(remaining, 0.0)) as scope:
            slots = await self._executor.run(eligible, snapshot)
        return slots, scope.cancelled_caught

    def _remaining_seconds(self) -> float | None:
        limit = self._config.budget.max_seconds
        if limit is None:
            return None
        return limit - (perf_counter() - self._started)

    def _budget_stop(self, snapshot: ContextSnapshot) -> tuple[StopReason, str] | None:
        budget = self._config.budget
        facts = len(snapshot)
        if facts > budget.max_facts:
            return StopReason.FACT_BUDGET_EXHAUSTED, f"max_facts ({facts} > {budget.max_facts})"
        if budget.max_tokens is not None and self._tokens > budget.max_tokens:
            return (
                StopReason.TOKEN_BUDGET_EXHAUSTED,
                f"max_tokens ({self._tokens} > {budget.max_tokens})",
            )
        remaining = self._remaining_seconds()
        if remaining is not None and remaining < 0:
            return StopReason.TIME_BUDGET_EXHAUSTED, self._time_detail()
        return None

    def _time_detail(self) -> str:
        elapsed = perf_counter() - self._started
        return f"max_seconds ({elapsed:.3f} > {self._config.budget.max_seconds})"

    def _fixed_point(self, snapshot: ContextSnapshot, cycle: int) -> ConvergeResult:
        return self._finish(snapshot, StopReason.CONVERGED, "fixed point reached", cycle)

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
        done.sort(key=lambda execution: execution.suggestor_id)
        for execution in done:
            if execution.outcome != "ok" and execution.phase == "execute":
                self._log.warning(
                    "suggestor_failed",
                    suggestor=execution.suggestor,
                    outcome=execution.outcome,
                    error=execution.error,
                )
        return tuple(done)

    def _record(
        self,
        cycle: int,
        dirty: frozenset[ContextKey],
        eligible: Sequence[Registration],
        refused: list[Execution],
        slots: Sequence[Slot],
        merger: Merger | tuple[()],
    ) -> None:
        executions = self._executions(refused, slots)
        if isinstance(merger, Merger):
            promoted = tuple(fact.ref for fact in merger.promoted)
            rejected = tuple(merger.rejections)
        else:
            promoted, rejected = (), ()
        self._record_trace(cycle, dirty, eligible, executions, promoted, rejected)

    def _record_trace(
        self,
        cycle: int,
        dirty: frozenset[ContextKey],
        eligible: Sequence[Registration],
        executions: tuple[Execution, ...],
        promoted: tuple[str, ...],
        rejected: tuple[Rejection, ...],
    ) -> None:
        self._cycles.append(
            trusted(
                CycleTrace,
                {
                    "cycle": cycle,
                    "dirty": tuple(key for key in ContextKey if key in dirty),
                    "eligible": tuple(reg.name for reg in eligible),
                    "executions": executions,
                    "promoted": promoted,
                    "rejected": rejected,
                    "held": (),
                    "violations": (),
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

    def _finish(
        self,
        snapshot: ContextSnapshot,
        reason: StopReason,
        detail: str,
        cycles: int,
        conflict: Conflict | None = None,
    ) -> ConvergeResult:
        proof = IntegrityProof.of(snapshot)
        trace = trusted(
            RunTrace,
            {
                "run_id": self.run_id,
                "inputs": self._inputs,
                "initial_root": self._initial_root,
                "cycles": tuple(self._cycles),
            },
        )
        elapsed_ms = (perf_counter() - self._started) * 1000.0
        self._log.info(
            "run_finished",
            stop_reason=reason.value,
            detail=detail,
            cycles=cycles,
            facts=proof.fact_count,
            tokens=self._tokens,
            merkle_root=proof.merkle_root,
            elapsed_ms=round(elapsed_ms, 3) if math.isfinite(elapsed_ms) else None,
        )
        return ConvergeResult(
            stop_reason=reason,
            detail=detail,
            cycles=cycles,
            context=snapshot,
            integrity=proof,
            trace=trace,
            rejections=tuple(self._rejections),
            tokens=self._tokens,
            run_id=self.run_id,
            conflict=conflict,
        )
