"""`LiveEffects`: a cycle's effects from the suggestors themselves.

Candidates come from the registry view (the suggestors that read a key that changed); those
whose `accepts` is true execute concurrently under the executor's limits and the run's time
budget. A result that comes back after the run's deadline stops the run like a cancelled
cycle (it is not merged); a suggestor that held the event loop past its limit is logged as
`suggestor_blocked`. The run's events are delivered under the same deadline.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter
from typing import final

import anyio

from .._core._budget import Stopwatch, time_detail
from .._core._context import ContextSnapshot
from .._core._effect import AgentEffect
from .._core._hitl import GateRequest
from .._core._key import AnyKey
from .._core._stop import StopReason
from .._core._suggestor import Suggestor, SuggestorId
from .._core._trace import CycleTrace, Execution
from ._abort import SuggestorAbort
from ._calls import CUT, Recorder, Returned, Slot, failure, records
from ._config import RunConfig
from ._executor import Executor
from ._registry import Registration, RegistryView
from ._retry import Retries
from ._run_events import RunEvents
from ._source import Batch, End
from ._watch import CancelWatch

__all__ = ["LiveEffects"]


@final
class LiveEffects:
    """The `EffectSource` of a live run: check `accepts`, execute the eligible, time it all."""

    __slots__ = (
        "_alone",
        "_budget",
        "_events",
        "_executor",
        "_max_cycles",
        "_max_facts",
        "_max_seconds",
        "_max_tokens",
        "_raise",
        "_record_effects",
        "_retries",
        "_stopwatch",
        "_view",
        "_watch",
    )

    def __init__(
        self,
        config: RunConfig,
        view: RegistryView,
        stopwatch: Stopwatch,
        events: RunEvents,
        watch: CancelWatch,
        history: Sequence[CycleTrace] = (),
    ) -> None:
        self._view = view
        self._watch = watch
        self._retries = Retries.replayed(view.own_retries, config.retry, history)
        self._record_effects = Recorder(config.policy) if config.record_effects else None
        self._executor = Executor(
            max_concurrency=config.max_concurrency,
            timeout=config.suggestor_timeout,
            mode=config.on_suggestor_error,
            record_effects=self._record_effects,
            watch=watch,
        )
        self._budget = budget = config.budget
        # read once: the budget is frozen, and a model's attributes are slower to load
        self._max_cycles = budget.max_cycles
        self._max_facts = budget.max_facts
        self._max_tokens = budget.max_tokens
        self._max_seconds = budget.max_seconds
        self._stopwatch = stopwatch
        self._raise = config.on_suggestor_error == "raise"
        self._alone = config.suggestor_timeout is None and self._max_seconds is None
        """Whether a lone eligible suggestor is awaited directly (nothing limits its time)."""
        self._events = events
        if self._max_seconds is not None:
            events.deliver_within(self._remaining)

    def end(self, cycle: int, /) -> End | None:
        """The cycle budget: cycle `max_cycles + 1` never starts; nor does one without time.

        Time runs out between cycles only while the run waits for its observers.
        """
        limit = self._max_cycles
        if cycle > limit:
            return End(StopReason.CYCLE_BUDGET_EXHAUSTED, f"max_cycles ({limit})", limit)
        seconds = self._max_seconds
        if seconds is not None and self._stopwatch.elapsed() > seconds:
            return End(StopReason.TIME_BUDGET_EXHAUSTED, self._time_detail(), cycle - 1)
        return None

    async def produce(
        self, cycle: int, dirty: frozenset[AnyKey], snapshot: ContextSnapshot, /
    ) -> Batch:
        """Run the eligible candidates of `dirty`, and the retries due, against `snapshot`.

        One eligible suggestor without a time limit (no timeout, no time budget) and no
        failed `accepts` or retry beside it, which is most cycles of a chain, is awaited
        directly (`Executor.alone`): no slot, task, scope or wrapper around it.
        """
        candidates, suggestors = self._view.candidates(dirty)
        if self._retries.pending:
            candidates = await self._with_retries(cycle, candidates)
            suggestors = tuple(reg.suggestor for reg in candidates)
        eligible, refused = self._eligible(suggestors, snapshot)
        if not eligible:
            return Batch((), tuple(refused), (), 0, None, bool(refused))
        if not self._alone or len(eligible) != 1 or refused or self._retries.pending:
            return await self._execute(cycle, eligible, refused, snapshot)
        outcome = await self._executor.alone(eligible[0], snapshot)
        if type(outcome) is Slot:
            return self._batch(cycle, eligible, [], [outcome], perf_counter(), timed_out=False)
        effect, record = outcome
        return Batch((eligible[0],), [record], ((eligible[0], effect),), effect.tokens, None, False)

    async def _execute(
        self,
        cycle: int,
        eligible: list[Registration],
        refused: list[Execution],
        snapshot: ContextSnapshot,
    ) -> Batch:
        """Execute the eligible concurrently through the executor, under the time budget."""
        slots = list(map(Slot, eligible))  # no comprehension: it makes a function each cycle
        watch = self._watch
        resumed, native = watch.resumed, watch.native
        started = perf_counter()
        remaining = self._remaining()
        if remaining is None:
            await self._executor.run(slots, snapshot)
            timed_out = False
        elif remaining > 0.0:
            with anyio.move_on_after(remaining) as scope:
                await self._executor.run(slots, snapshot, started + remaining)
            # a result after the deadline (the loop was held, or a cancellation swallowed)
            timed_out = scope.cancelled_caught or any(slot.late for slot in slots)
        else:
            timed_out = True  # observers spent the time that was left: nothing runs
        if watch.resumed != resumed:  # a call may have swallowed the run's cancellation
            await watch.honour(native)
        return self._batch(cycle, eligible, refused, slots, started, timed_out=timed_out)

    def _batch(
        self,
        cycle: int,
        eligible: list[Registration],
        refused: list[Execution],
        slots: list[Slot],
        started: float,
        *,
        timed_out: bool,
    ) -> Batch:
        """The cycle's batch from its filled slots; failures are numbered for retries."""
        tokens = 0
        failed = timed_out or bool(refused)
        effects: list[tuple[Registration, AgentEffect]] = []
        for slot in slots:
            if (effect := slot.effect) is not None:
                tokens += effect.tokens
                effects.append((slot.reg, effect))
            elif slot.execution is not None:
                failed = True  # a failure or a timeout: the slot has an execution, no effect
                tokens += slot.execution.tokens
                if slot.held is not None:
                    self._events.suggestor_blocked(cycle, slot.reg.name, slot.held)
        calls = _calls(refused, slots, started, cancelled=timed_out)
        if failed or self._retries.pending:
            calls = self._retried(cycle, records(calls))
        if timed_out:
            stop = StopReason.TIME_BUDGET_EXHAUSTED, self._time_detail()
            return Batch(tuple(eligible), calls, (), tokens, stop, True)
        return Batch(tuple(eligible), calls, tuple(effects), tokens, None, failed)

    def budget_stop(self, facts: int, tokens: int, /) -> tuple[StopReason, str] | None:
        """The fact, token or time budget the run has exceeded, measured now; `None` if none."""
        if facts > self._max_facts:
            return StopReason.FACT_BUDGET_EXHAUSTED, f"max_facts ({facts} > {self._max_facts})"
        limit = self._max_tokens
        if limit is not None and tokens > limit:
            return StopReason.TOKEN_BUDGET_EXHAUSTED, f"max_tokens ({tokens} > {limit})"
        seconds = self._max_seconds
        if seconds is not None and self._stopwatch.elapsed() > seconds:
            return StopReason.TIME_BUDGET_EXHAUSTED, self._time_detail()
        return None

    def decisions(self, held: Sequence[GateRequest], /) -> None:
        """A live run always pauses for a human."""
        return None

    def retrying(self, cycle: int, /) -> bool:
        """Whether a suggestor that failed is still to be tried again."""
        return self._retries.pending

    async def _with_retries(
        self, cycle: int, candidates: tuple[Registration, ...]
    ) -> tuple[Registration, ...]:
        """`candidates` plus the retries due in `cycle`, in id order; waits for a retry that
        only its seconds backoff holds back when nothing else would run."""
        retries = self._retries
        due = retries.due(cycle)
        if not due and not candidates:
            wait = retries.wait(cycle)
            if wait:
                remaining = self._remaining()
                await anyio.sleep(wait if remaining is None else max(0.0, min(wait, remaining)))
                due = retries.due(cycle)
        if not due:
            return candidates
        by_id = {reg.id: reg for reg in candidates}
        for sid in due:
            by_id.setdefault(sid, self._view.registrations[sid])
        return tuple(by_id[sid] for sid in sorted(by_id))

    def _retried(self, cycle: int, executions: Sequence[Execution]) -> tuple[Execution, ...]:
        """Number the cycle's calls in their failure streaks and schedule the retries."""
        retries = self._retries
        numbered = retries.numbered(executions)
        retries.record(cycle, numbered)
        for execution in numbered:
            attempt = retries.attempt(SuggestorId(execution.suggestor_id))
            if execution.outcome != "ok" and attempt > 1:
                self._events.retry_scheduled(cycle, execution, attempt)
        return numbered

    def _remaining(self) -> float | None:
        limit = self._max_seconds
        return None if limit is None else limit - self._stopwatch.elapsed()

    def _time_detail(self) -> str:
        return time_detail(self._budget, self._stopwatch.elapsed())

    def _eligible(
        self, candidates: Sequence[Suggestor], snapshot: ContextSnapshot
    ) -> tuple[list[Registration], list[Execution]]:
        """The registrations of the candidates whose `accepts` is true; failed `accepts`
        calls become executions. A registration is looked up only for an answer other than
        `False` (reading each from its registration cost W1 about 0.2 µs a cycle)."""
        eligible: list[Registration] = []
        refused: list[Execution] = []
        raise_errors = self._raise
        for suggestor in candidates:
            try:
                # a method call on the suggestor: CPython inlines it (a bound method kept
                # on the registration measured about 40 % slower per call)
                verdict = suggestor.accepts(snapshot)
                # tested here, not after the `try`: the handler's code sits between, and
                # jumping over it took 0.8 µs a cycle of 200 calls in a run
                if verdict is False:
                    continue
            except Exception as error:
                if raise_errors:
                    raise
                # accepts calls are not timed: timing each costs as much as a cheap accepts
                reg = self._view.by_object[id(suggestor)]
                refused.append(failure(reg, "failed", perf_counter(), error, phase="accepts"))
                continue
            except BaseException as error:
                if isinstance(error, anyio.get_cancelled_exc_class()):
                    raise
                name = self._view.by_object[id(suggestor)].name
                raise SuggestorAbort(error, name, "accepts") from None
            reg = self._view.by_object[id(suggestor)]
            if verdict is True:
                eligible.append(reg)
                continue
            error = TypeError(
                f"accepts() of {reg.name!r} returned {type(verdict).__name__}, expected bool"
            )
            if raise_errors:
                raise error
            refused.append(failure(reg, "failed", perf_counter(), error, phase="accepts"))
        return eligible, refused


def _calls(
    refused: list[Execution], slots: Sequence[Slot], started: float, *, cancelled: bool
) -> list[Execution | Returned]:
    """The cycle's calls in id order; a slot the time budget cancelled is `timed_out`.

    A call that returned an effect leaves what its record says (`Slot.returned`), built into
    an `Execution` when something reads it (`records`).
    """
    calls: list[Execution | Returned] = list(refused)
    for slot in slots:
        if (returned := slot.returned) is not None:
            calls.append(returned)
        elif (execution := slot.execution) is not None:
            calls.append(execution)
        elif cancelled:
            cut = failure(slot.reg, "timed_out", started, CUT)
            calls.append(cut)
    if refused:
        calls.sort(key=_suggestor_id)
    return calls


def _suggestor_id(call: Execution | Returned) -> int:
    return int(call[0].id) if isinstance(call, tuple) else call.suggestor_id
